package main

import (
	"strings"
	"testing"
	"time"
)

func TestReadEnvoyStats(t *testing.T) {
	read := func(env ...string) (*envoySettings, error) {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return readEnvoyEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
	}
	// envoy's defaults: StatsD on localhost:8125 over TCP, every 10s.
	es, err := read()
	if err != nil || es.stats == nil {
		t.Fatalf("defaults: %+v %v", es, err)
	}
	if o := es.stats; o.Host != "localhost" || o.Port != 8125 || o.Protocol != "tcp" || o.FlushInterval != 10*time.Second || o.DogStatsD {
		t.Fatalf("defaults: %+v", o)
	}
	es, err = read("STATSD_HOST=stats", "STATSD_PORT=9125", "STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=1s", "EXTRA_TAGS=a:1,b:2")
	if o := es.stats; err != nil || o.Host != "stats" || o.Port != 9125 || o.Protocol != "udp" || o.FlushInterval != time.Second || o.ExtraTags["b"] != "2" {
		t.Fatalf("set: %+v %v", o, err)
	}
	for _, off := range [][]string{{"DISABLE_STATS=true"}, {"USE_STATSD=false"}, {"USE_PROMETHEUS=true"}} {
		if es, err := read(off...); err != nil || es.stats != nil {
			t.Errorf("%v: stats %+v, %v; want none", off, es, err)
		}
	}
	if es, err := read("USE_DOG_STATSD=true", "USE_STATSD=false"); err != nil || es.stats == nil || !es.stats.DogStatsD {
		t.Errorf("DogStatsD: %+v %v", es, err)
	}
	for _, bad := range []string{"USE_DOG_STATSD=true", "STATSD_PORT=x", "STATS_FLUSH_INTERVAL=10", "EXTRA_TAGS=a", "STATSD_PROTOCOL=sctp"} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := read(bad); err == nil || !strings.HasPrefix(err.Error(), name+":") {
			t.Errorf("%s: error %v, want one naming %s", bad, err, name)
		}
	}
}
