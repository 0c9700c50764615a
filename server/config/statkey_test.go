package config

import "testing"

// The expected keys are envoyproxy/ratelimit's (f2fb157,
// test/config/config_test.go and README's "Statistics").
func TestEnvoyStatKey(t *testing.T) {
	d, err := Parse("stat.yaml", []byte(`domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key4
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 80}
  - key: wild
    value: w*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 80}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []Entry
		want    string
		varies  bool
	}{
		{[]Entry{{"key1", "value1"}, {"subkey1", "x"}}, "test-domain.key1_value1.subkey1", false},
		{[]Entry{{"key2", "anything"}}, "test-domain.key2", false},
		{[]Entry{{"key3", "v3"}}, "test-domain.key3_v3", true},
		{[]Entry{{"key4", "v4"}}, "test-domain.key4_v4", true},
		{[]Entry{{"route", "api/v1"}, {"method", "GET"}}, "test-domain.route_api/*.method", false},
		{[]Entry{{"service", "svc/a"}, {"endpoint", "get"}}, "test-domain.service_svc/*.endpoint_get", true},
		{[]Entry{{"path", "path/a"}, {"file", "file/b"}, {"type", "t"}}, "test-domain.path_path/*.file_file/*.type", false},
		{[]Entry{{"wild", "wonder"}}, "test-domain.wild_wonder", true},
	} {
		l := d.Match(c.entries)
		if l == nil {
			t.Fatalf("%v: no limit", c.entries)
		}
		if got := l.EnvoyStatKey("test-domain", c.entries); got != c.want {
			t.Errorf("%v: key %q, want %q", c.entries, got, c.want)
		}
		if got := l.EnvoyStatKeyVaries(); got != c.varies {
			t.Errorf("%v: varies %v, want %v", c.entries, got, c.varies)
		}
		if got := l.EnvoyStatKey("test-domain", nil); !c.varies && got != c.want {
			t.Errorf("%v: the configuration's key %q, want %q", c.entries, got, c.want)
		}
	}
}
