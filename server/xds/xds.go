// Package xds is the server's xDS configuration source: it subscribes to
// go-control-plane's RateLimitConfig resources on an xDS management server
// over ADS, state of the world, one resource per domain, as
// envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW) does, and hands every
// push, as configuration sources, to a function of its user (the server
// parses, checks and applies it). It reconnects with backoff and resends
// the last accepted version, and ACKs or NACKs each push by what that
// function returned.
package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/floodgate-dev/floodgate/server/config"
)

// TypeURL is the type of the resources the xDS configuration source
// subscribes to: go-control-plane's RateLimitConfig, as envoyproxy/ratelimit
// (CONFIG_TYPE=GRPC_XDS_SOTW) does.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults of Options.
const (
	DefaultRetryInterval = 3 * time.Second // envoy's CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
	DefaultMaxRetry      = time.Minute     // envoy's XDS_CLIENT_BACKOFF_MAX_INTERVAL
)

// Options configure the xDS configuration source: instead of reading
// files, the server subscribes to RateLimitConfig resources on an xDS
// management server over ADS, state of the world
// (envoy.service.discovery.v3.AggregatedDiscoveryService), one resource per
// domain.
type Options struct {
	// Address is the management server's gRPC target (host:port, or any
	// grpc-go target such as dns:///host:port or unix:PATH). Required.
	Address string
	// NodeID and NodeMetadata identify this server to the management
	// server (the node of its requests; a snapshot cache keys snapshots by
	// the node id). Metadata values are strings.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (for example an
	// authorization header).
	Headers map[string]string
	// TLS, when set, secures the connection (nil: plaintext).
	TLS *tls.Config
	// RetryInterval is the first delay before connecting again after the
	// stream ends or cannot be opened; each failure in a row doubles it, up
	// to MaxRetryInterval, with a random ±25%. A stream that received a
	// response starts over from RetryInterval. DefaultRetryInterval and
	// DefaultMaxRetry when 0.
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// MaxMsgSize bounds a response (grpc-go's 4 MiB when 0).
	MaxMsgSize int
	// WaitFirst makes Serve start serving the APIs only once the first
	// push has been applied (loaded or rejected), as envoyproxy/ratelimit
	// does unless FORCE_START_WITHOUT_INITIAL_CONFIG: until then a client
	// connects but is not answered. false: the APIs serve at once, answering
	// "no configuration" until the first push.
	WaitFirst bool
}

// Client subscribes to RateLimitConfig resources and hands each push to
// apply. It keeps the last accepted version (sent on reconnecting, so an
// unchanged management server need not push again).
type Client struct {
	o     Options
	node  *corev3.Node
	apply func(version string, srcs []config.Source, decodeErr error) error
	log   *slog.Logger

	mu       sync.Mutex
	accepted string // version_info of the last accepted push

	// The last rejected push (its version and a digest of its resources)
	// and its error. A snapshot cache answers a NACK by sending the same
	// push again at once; a repeat is NACKed again without being loaded,
	// counted or logged, after nackDelay (doubling up to MaxRetryInterval),
	// so the two do not loop at full speed.
	rejectedKey string
	rejectedErr error
	nackDelay   time.Duration
}

func New(o Options, apply func(string, []config.Source, error) error, log *slog.Logger) (*Client, error) {
	if o.Address == "" {
		return nil, errors.New("xds: no management server address")
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = DefaultMaxRetry
	}
	o.MaxRetryInterval = max(o.MaxRetryInterval, o.RetryInterval)
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range o.NodeMetadata {
		md.Fields[k] = structpb.NewStringValue(v)
	}
	node := &corev3.Node{Id: o.NodeID, Metadata: md, UserAgentName: "floodgate"}
	return &Client{o: o, node: node, apply: apply, log: log}, nil
}

// run subscribes until ctx ends, connecting again with back-off whenever the
// stream ends. The configuration last accepted keeps serving meanwhile.
func (x *Client) Run(ctx context.Context) {
	delay := x.o.RetryInterval
	for {
		received, err := x.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			delay = x.o.RetryInterval
		}
		wait := time.Duration(float64(delay) * (0.75 + rand.Float64()/2))
		x.log.Warn("xDS: the stream to the management server ended; the current configuration keeps serving", "xds", x.o.Address, "error", err, "retry_in", wait.Round(time.Millisecond).String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, x.o.MaxRetryInterval)
	}
}

// session connects, subscribes and handles pushes until the stream fails.
// received reports whether a response arrived.
func (x *Client) session(ctx context.Context) (received bool, err error) {
	creds := insecure.NewCredentials()
	if x.o.TLS != nil {
		creds = credentials.NewTLS(x.o.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: x.o.RetryInterval, Multiplier: 1.6, Jitter: 0.2, MaxDelay: x.o.MaxRetryInterval,
		}, MinConnectTimeout: 10 * time.Second}),
	}
	if x.o.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.o.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(x.o.Address, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(x.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(x.o.Headers))
	}
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	x.mu.Lock()
	accepted := x.accepted
	x.mu.Unlock()
	// The node goes on the first request only; no resource names: every
	// RateLimitConfig of this node (a wildcard subscription).
	if err := stream.Send(&discoverypb.DiscoveryRequest{Node: x.node, TypeUrl: TypeURL, VersionInfo: accepted}); err != nil {
		return false, sendErr(stream, err)
	}
	x.log.Info("xDS: subscribed to the management server", "xds", x.o.Address, "node", x.o.NodeID)
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		if resp.GetTypeUrl() != TypeURL {
			x.log.Warn("xDS: ignoring a response of another type", "type", resp.GetTypeUrl())
			continue
		}
		ack := &discoverypb.DiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		key := pushKey(resp)
		if key == x.rejectedKey {
			err = x.rejectedErr
			t := time.NewTimer(x.nackDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return received, ctx.Err()
			case <-t.C:
			}
			x.nackDelay = min(2*x.nackDelay, x.o.MaxRetryInterval)
		} else {
			srcs, derr := xdsSources(resp.GetResources())
			err = x.apply(resp.GetVersionInfo(), srcs, derr)
			x.rejectedKey, x.rejectedErr, x.nackDelay = "", nil, x.o.RetryInterval
			if err != nil {
				x.rejectedKey, x.rejectedErr = key, err
			}
		}
		x.mu.Lock()
		if err == nil {
			x.accepted = resp.GetVersionInfo()
		} else {
			ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		}
		ack.VersionInfo = x.accepted // a NACK names the version still served
		x.mu.Unlock()
		if err := stream.Send(ack); err != nil {
			return received, sendErr(stream, err)
		}
	}
}

// pushKey tells pushes apart: their version and a digest of their
// resources in any order (a snapshot cache sends them in map order), not
// the nonce, which every response has anew.
func pushKey(resp *discoverypb.DiscoveryResponse) string {
	sums := make([]string, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s\x00", len(r.GetTypeUrl()), r.GetTypeUrl())
		h.Write(r.GetValue())
		sums = append(sums, hex.EncodeToString(h.Sum(nil)))
	}
	sort.Strings(sums)
	return resp.GetVersionInfo() + "\x00" + strings.Join(sums, ",")
}

// sendErr is the stream's status when Send fails with io.EOF (the status
// comes from Recv).
func sendErr(stream grpc.BidiStreamingClient[discoverypb.DiscoveryRequest, discoverypb.DiscoveryResponse], err error) error {
	if _, rerr := stream.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// xdsSources decodes RateLimitConfig resources into configuration
// documents, sorted by resource name (as a directory's files are by name).
func xdsSources(resources []*anypb.Any) ([]config.Source, error) {
	srcs := make([]config.Source, 0, len(resources))
	for i, r := range resources {
		if r.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resource %d: type %q, want %q", i, r.GetTypeUrl(), TypeURL)
		}
		rc := &rlsconfpb.RateLimitConfig{}
		if err := anypb.UnmarshalTo(r, rc, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		data, err := RateLimitConfigYAML(rc)
		if err != nil {
			return nil, fmt.Errorf("resource %q: %w", rc.GetName(), err)
		}
		srcs = append(srcs, config.Source{Name: "xds:" + rc.GetName(), Data: data})
	}
	sort.SliceStable(srcs, func(i, j int) bool { return srcs[i].Name < srcs[j].Name })
	return srcs, nil
}

// The YAML form of a RateLimitConfig: the keys of the configuration file.
type (
	xdsYAMLDomain struct {
		Domain      string              `yaml:"domain"`
		Descriptors []xdsYAMLDescriptor `yaml:"descriptors,omitempty"`
	}
	xdsYAMLDescriptor struct {
		Key            string              `yaml:"key"`
		Value          string              `yaml:"value,omitempty"`
		RateLimit      *xdsYAMLRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []xdsYAMLDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool                `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool                `yaml:"detailed_metric,omitempty"`
		QuotaMode      bool                `yaml:"quota_mode,omitempty"`
		Metadata       map[string]any      `yaml:"metadata,omitempty"`
	}
	xdsYAMLRateLimit struct {
		Unit            string           `yaml:"unit"`
		RequestsPerUnit uint32           `yaml:"requests_per_unit"`
		Unlimited       bool             `yaml:"unlimited,omitempty"`
		Name            string           `yaml:"name,omitempty"`
		Replaces        []xdsYAMLReplace `yaml:"replaces,omitempty"`
	}
	xdsYAMLReplace struct {
		Name string `yaml:"name"`
	}
)

// RateLimitConfigYAML writes an xDS RateLimitConfig resource as the
// configuration file envoyproxy/ratelimit's conversion (its
// ConfigXdsProtoToYaml) makes of it, for config.LoadSources: so a pushed
// resource is checked exactly as a file is. The unit is the enum's name
// (UNKNOWN when unset, which only an unlimited limit accepts).
func RateLimitConfigYAML(rc *rlsconfpb.RateLimitConfig) ([]byte, error) {
	return yaml.Marshal(xdsYAMLDomain{Domain: rc.GetDomain(), Descriptors: xdsDescriptors(rc.GetDescriptors())})
}

func xdsDescriptors(ds []*rlsconfpb.RateLimitDescriptor) []xdsYAMLDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]xdsYAMLDescriptor, len(ds))
	for i, d := range ds {
		out[i] = xdsYAMLDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			Descriptors:    xdsDescriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
		}
		if rl := d.GetRateLimit(); rl != nil {
			y := &xdsYAMLRateLimit{
				Unit:            rl.GetUnit().String(),
				RequestsPerUnit: rl.GetRequestsPerUnit(),
				Unlimited:       rl.GetUnlimited(),
				Name:            rl.GetName(),
			}
			for _, r := range rl.GetReplaces() {
				y.Replaces = append(y.Replaces, xdsYAMLReplace{Name: r.GetName()})
			}
			out[i].RateLimit = y
		}
	}
	return out
}

// ParseNodeMetadata reads envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_NODE_METADATA: "k1=v1,k2=v2" (entries without '=' are
// skipped, as envoy does).
// ParseHeaders parses envoyproxy/ratelimit's form of extra xDS request
// headers, "k1:v1,k2:v2" (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS), into
// Options.Headers. An entry without ':' or with an empty name is an
// error naming it; names are lower-cased, as gRPC metadata keys are.
func ParseHeaders(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		k, v, ok := strings.Cut(e, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return nil, fmt.Errorf("xDS header %q: want name:value", e)
		}
		m[k] = strings.TrimSpace(v)
	}
	return m, nil
}

func ParseNodeMetadata(s string) map[string]string {
	m := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return m
}
