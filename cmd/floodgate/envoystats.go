package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/server/envoystats"
)

// readEnvoyStats reads envoyproxy/ratelimit's stats variables: the StatsD
// (or DogStatsD) sink to send its statistics to, or nil for none. As envoy
// does, DISABLE_STATS wins, USE_STATSD is true by default, and USE_DOG_STATSD
// needs USE_STATSD=false. STATSD_PROTOCOL is gostats' own variable, which
// envoy's StatsD sink reads too: tcp by default, or udp.
func readEnvoyStats(lookup func(string) (string, bool), boolean func(string, bool) bool, bad func(string, string, ...any)) *envoystats.Options {
	get := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	o := &envoystats.Options{Host: envoystats.DefaultHost, Port: envoystats.DefaultPort, Protocol: "tcp",
		FlushInterval: envoystats.DefaultFlushInterval}
	if v := get("STATSD_HOST"); v != "" {
		o.Host = v
	}
	if v := get("STATSD_PORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 65535 {
			bad("STATSD_PORT", "%q is not a port", v)
		}
		o.Port = n
	}
	if v := get("STATSD_PROTOCOL"); v != "" {
		switch strings.ToLower(v) {
		case "tcp", "udp":
			o.Protocol = strings.ToLower(v)
		default:
			bad("STATSD_PROTOCOL", "%q is not tcp or udp", v)
		}
	}
	if v := get("STATS_FLUSH_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("STATS_FLUSH_INTERVAL", "%q is not a positive duration (10s, 500ms)", v)
		}
		o.FlushInterval = d
	}
	tags, err := envoystats.ParseExtraTags(get("EXTRA_TAGS"))
	if err != nil {
		bad("EXTRA_TAGS", "%v: want key:value,key:value", err)
	}
	o.ExtraTags = tags
	disabled := boolean("DISABLE_STATS", false)
	dog := boolean("USE_DOG_STATSD", false)
	statsd := boolean("USE_STATSD", true)
	prom := boolean("USE_PROMETHEUS", false)
	switch {
	case disabled:
		return nil
	case dog && statsd:
		bad("USE_DOG_STATSD", "unable to use more than one stats sink at the same time: set USE_STATSD=false with USE_DOG_STATSD=true (as envoyproxy/ratelimit requires)")
		return nil
	case dog:
		o.DogStatsD = true
		return o
	case statsd && !prom:
		return o
	}
	return nil // USE_PROMETHEUS, or USE_STATSD=false: no StatsD
}
