package dashboard

import "testing"

func TestTopKeys(t *testing.T) {
	tk := NewTopKeys(3)
	for _, k := range []string{"a", "a", "a", "b", "b", "c", "d"} {
		tk.Add("api", "p", k)
	}
	got := tk.List()
	// d replaced c (count 1) and inherits its count as error.
	want := []KeyCount{{Key: "a", Count: 3}, {Key: "b", Count: 2}, {Key: "d", Count: 2, Error: 1}}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Count != want[i].Count || got[i].Error != want[i].Error {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestQuantile(t *testing.T) {
	prev := []bucketCount{{0.001, 0}, {0.01, 0}, {1, 0}}
	cur := []bucketCount{{0.001, 50}, {0.01, 99}, {1, 100}}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if q := quantileMS(cur, prev, 0.5); !near(q, 1) {
		t.Fatalf("p50 %v ms, want 1", q)
	}
	if q := quantileMS(cur, prev, 0.99); !near(q, 10) {
		t.Fatalf("p99 %v ms, want 10", q)
	}
	if q := quantileMS(prev, prev, 0.5); q != -1 {
		t.Fatalf("no observations: %v", q)
	}
}
