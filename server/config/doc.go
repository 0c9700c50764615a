// Package config reads the decision server's rate limit configuration: the
// YAML files of envoyproxy/ratelimit, unchanged, plus a choice of algorithm
// per limit.
//
// # Files
//
// A file holds one domain and a tree of descriptors:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type          # matches the request entry ("message_type", "marketing")
//	    value: marketing
//	    descriptors:
//	      - key: to_number         # no value: the default for any to_number
//	        rate_limit:
//	          unit: day
//	          requests_per_unit: 5
//	  - key: path
//	    value: /api/*/users        # '*' matches any run of characters, anywhere
//	    rate_limit:
//	      name: api_users
//	      unit: second
//	      requests_per_unit: 20
//	      algorithm: gcra          # floodgate extension; fixed_window by default
//	      burst: 40
//
// Load reads a file, or every *.yaml and *.yml file of a directory (one domain
// each; names starting with '.' are skipped, as are subdirectories). Parse
// reads one file's bytes.
//
// The keys of envoyproxy/ratelimit are accepted with its meaning:
//
//   - top level: domain (required), descriptors.
//   - descriptor: key (required), value, rate_limit, descriptors, shadow_mode,
//     detailed_metric, quota_mode, value_to_metric, share_threshold, metadata.
//   - rate_limit: unit (second, minute, hour, day, week, month or year, in any
//     case; required unless unlimited), requests_per_unit (0 to 2^32-1; 0
//     denies every request), unlimited, name, replaces (a list of {name}).
//
// floodgate adds, per rate_limit:
//
//   - unit_multiplier: the number of units in the limit's period, a whole
//     number from 1 (the default) up to what keeps the period within
//     ratelimit.MaxPeriod (ten years), as Envoy's RLS API names it (its
//     RateLimitOverride and current_limit): unit second, unit_multiplier 10
//     and requests_per_unit 1000 is 1,000 requests per 10 seconds, for
//     every algorithm. A fixed window's windows start at multiples of the
//     period since the Unix epoch;
//   - algorithm: fixed_window (the default, envoyproxy/ratelimit's only one),
//     sliding_window, sliding_log, token_bucket, leaky_bucket or gcra;
//   - burst (token_bucket, leaky_bucket, gcra), delay (leaky_bucket: a number
//     of requests, or "nodelay") and buckets (sliding_window);
//   - lease (true or false: decide the limit's hot keys from quota leases).
//
// envoyproxy/ratelimit reports these keys as unknown; they are read the
// same way whether LoadOptions.Envoy is set or not.
//
// Limit.Rule is the ratelimit.Rule those keys describe; see Limit for how each
// algorithm maps requests_per_unit, the period and the parameters onto it.
//
// Some keys are read, checked and exposed but not acted upon by this package:
// shadow_mode, detailed_metric and quota_mode (Limit.ShadowMode,
// Limit.DetailedMetric, Limit.QuotaMode: what they mean is the server's
// business), metadata (Limit.Metadata, kept as decoded) and value_to_metric
// (metric naming only). share_threshold, allowed only on a value with '*',
// makes every value that matches the pattern share one counter: it changes
// Limit.StateKey.
//
// # Matching
//
// Domain.Match follows envoyproxy/ratelimit's GetLimit exactly: for each
// entry of the request descriptor, in order, the level's descriptor with the
// same key and value is taken; failing that the first value pattern (in file
// order) with that key that matches the value; failing that the descriptor
// with that key and no value (the default). A limit applies only when it sits
// on the descriptor matched by the request's last entry: a request shorter
// than the configuration gets the limit of the level it ends on, if any, and
// a request longer than the configuration gets none. The search never backs
// up: when the exact match has no matching child, the default is not tried.
// An unknown domain matches nothing. ApplyReplaces then drops limits named by
// another matched limit's replaces, as envoyproxy/ratelimit does.
//
// # Errors
//
// Every problem is reported as "FILE:LINE: problem", and Parse and Load
// report all of them (up to a cap per file), not only the first: unknown keys
// (with the place they belong or the key meant, when there is one), values of
// the wrong type, bad units, numbers out of range (a unit_multiplier below 1
// or making a period over ten years), duplicate descriptors at
// one level, a missing domain, replaces naming no limit of the domain,
// algorithm parameters that the algorithm does not take, and rules that
// ratelimit.New would reject. The error is an ErrorList of *Error.
//
// # Differences from envoyproxy/ratelimit
//
// Everything envoyproxy/ratelimit loads, this package loads with the same
// meaning, except for mistakes envoyproxy/ratelimit ignores silently:
//
//   - a known key in the wrong place (shadow_mode inside rate_limit, say) is
//     an error here; envoyproxy/ratelimit checks key names against one list
//     for the whole file and then ignores such a key;
//   - a key twice in one mapping, and a second YAML document in a file, are
//     errors; envoyproxy/ratelimit keeps the last key and the first document;
//   - a replaces entry must name a rate_limit of the same domain.
//
// Like envoyproxy/ratelimit, the key and value of a descriptor are joined
// with "_" to find duplicates, so key "a" value "b_c" and key "a_b" value "c"
// at one level are duplicates. Matching, though, compares key and value
// apart: envoyproxy/ratelimit looks the joined string up, so there a request
// entry ("a", "b_c") also finds the descriptor of key "a_b" and value "c".
//
// A Config, a Domain and their Limits are not changed after loading and are
// safe for concurrent use.
package config
