package callid

import "testing"

func TestNewUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := New()
		if seen[id] || len(id) > 30 || len(id) < 18 {
			t.Fatalf("call ID %q repeated or of odd length", id)
		}
		seen[id] = true
	}
}
