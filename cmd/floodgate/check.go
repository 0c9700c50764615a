package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Check's exit statuses beyond exitOK, exitFailure and exitUsage.
const (
	exitOverLimit = 3 // the server answered OVER_LIMIT
	exitNoMatch   = 4 // no limit matched any descriptor (without --allow-unmatched)
)

const checkUsage = `Usage: floodgate check --domain DOMAIN [flags] DESCRIPTOR...

Asks a running floodgate (or any Envoy rate limit service) for a decision
over gRPC (envoy.service.ratelimit.v3). Each DESCRIPTOR argument is one
descriptor: its entries as key=value, separated by commas, in order.

Exit status: 0 when the request is allowed, 3 when it is over the limit,
4 when no limit matched any descriptor (the domain is unknown to the server,
or none of its descriptors match these; --allow-unmatched makes that 0),
1 when the server cannot be asked, 2 on a usage error.

Flags:
%s
Examples:
  floodgate check --domain api user=alice
  floodgate check --domain messaging message_type=marketing,to_number=2061234567
  floodgate check --addr rls.internal:8081 --domain api --cost 5 user=alice path=/upload
  floodgate check --domain api --json user=alice        # the response as protojson
`

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("floodgate check")
	var (
		addr     = fs.String("addr", "localhost:8081", "gRPC `address` of the server")
		domain   = fs.String("domain", "", "rate limit `domain` (required)")
		cost     = fs.Uint("cost", 1, "units the request consumes (hits_addend); 0 peeks")
		timeout  = fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
		useTLS   = fs.Bool("tls", false, "connect with TLS")
		insecTLS = fs.Bool("tls-skip-verify", false, "with --tls, do not verify the server's certificate")
		token    = fs.String("token", "", "bearer `token` to send")
		asJSON   = fs.Bool("json", false, "print the response as protojson")
		anyMatch = fs.Bool("allow-unmatched", false, "exit 0, not 4, when no limit matches any descriptor")
	)
	help := fmt.Sprintf(checkUsage, flagDefaults(fs))
	rest, code, done := parse(fs, args, true, help, stdout, stderr)
	if done {
		return code
	}
	if *domain == "" {
		return usageError(stderr, "floodgate check", "--domain is required")
	}
	if len(rest) == 0 {
		return usageError(stderr, "floodgate check", "give at least one descriptor, such as user=alice")
	}
	req := &rls.RateLimitRequest{Domain: *domain}
	for i, arg := range rest {
		d, err := parseDescriptor(arg)
		if err != nil {
			return usageError(stderr, "floodgate check", fmt.Sprintf("descriptor %d %q: %v", i+1, arg, err))
		}
		d.HitsAddend = wrapperspb.UInt64(uint64(*cost))
		req.Descriptors = append(req.Descriptors, d)
	}

	creds := insecure.NewCredentials()
	if *useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: *insecTLS, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate check: %v\n", err)
		return exitFailure
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	resp, err := rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate check: %s: %v\n", *addr, err)
		if hint := checkHint(status.Code(err), *token != ""); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		return exitFailure
	}
	if *asJSON {
		out, _ := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		fmt.Fprintln(stdout, string(out))
	} else {
		printDecision(stdout, req, resp)
	}
	if resp.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT {
		return exitOverLimit
	}
	if !*anyMatch && !anyLimit(resp) {
		fmt.Fprintf(stderr, "floodgate check: no limit matched: the server does not know the domain %q, or none of its descriptors match %s (--allow-unmatched accepts this)\n",
			*domain, strings.Join(rest, " "))
		return exitNoMatch
	}
	return exitOK
}

// anyLimit reports whether a limit, unlimited included, matched at least
// one descriptor of the response: a status without one is what the server
// answers for a descriptor that no rule matched.
func anyLimit(resp *rls.RateLimitResponse) bool {
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil || st.GetLimitRemaining() == 1<<32-1 || st.GetCode() == rls.RateLimitResponse_OVER_LIMIT {
			return true
		}
	}
	return false
}

// parseDescriptor reads "k=v,k2=v2".
func parseDescriptor(s string) (*rlscommon.RateLimitDescriptor, error) {
	d := &rlscommon.RateLimitDescriptor{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("entry %q is not key=value", kv)
		}
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d, nil
}

// printDecision writes a response as a table.
func printDecision(w io.Writer, req *rls.RateLimitRequest, resp *rls.RateLimitResponse) {
	fmt.Fprintln(w, resp.GetOverallCode())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESCRIPTOR\tCODE\tLIMIT\tREMAINING\tRESET")
	for i, st := range resp.GetStatuses() {
		var entries []string
		if i < len(req.Descriptors) {
			for _, e := range req.Descriptors[i].Entries {
				entries = append(entries, e.Key+"="+e.Value)
			}
		}
		limit, remaining, reset := "-", "-", "-"
		if l := st.GetCurrentLimit(); l != nil {
			limit = fmt.Sprintf("%d/%s", l.GetRequestsPerUnit(), strings.ToLower(l.GetUnit().String()))
			if m := l.GetUnitMultiplier().GetValue(); m > 1 {
				limit = fmt.Sprintf("%d/%d %ss", l.GetRequestsPerUnit(), m, strings.ToLower(l.GetUnit().String()))
			}
			if l.GetName() != "" {
				limit += " (" + l.GetName() + ")"
			}
			remaining = strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
		} else if st.GetLimitRemaining() == 1<<32-1 {
			limit, remaining = "unlimited", "unlimited"
		}
		if d := st.GetDurationUntilReset(); d != nil {
			reset = d.AsDuration().String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", strings.Join(entries, ","), st.GetCode(), limit, remaining, reset)
	}
	tw.Flush()
}

// checkHint says what to do about a failed call, by its gRPC code; "" when
// the server's message says it all.
func checkHint(c codes.Code, sentToken bool) string {
	switch c {
	case codes.Unauthenticated:
		if sentToken {
			return "The server refused the token: give the one in its --token-file (or $FLOODGATE_TOKEN) with --token."
		}
		return "The server requires a bearer token: give it with --token."
	case codes.Unavailable:
		return "Is 'floodgate serve' running there? --addr sets the address; --tls if it serves TLS."
	case codes.DeadlineExceeded:
		return "No answer within --timeout: the server or its store is slow, or the address is not a floodgate server."
	}
	return ""
}
