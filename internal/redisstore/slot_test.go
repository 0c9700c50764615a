package redisstore

import (
	"context"
	"testing"
)

// TestSlot checks Slot against slots Redis itself reports (CLUSTER KEYSLOT)
// for these tags, and that escaping is applied first.
func TestSlot(t *testing.T) {
	r := New(errScripter{}, nil, "fg", nil)
	for tag, want := range map[string]int{
		"foo":       12182, // CLUSTER KEYSLOT foo
		"bar":       5061,
		"user:1000": 1649,
		"123456789": 12739,                       // CRC16/XMODEM check value 0x31C3 % 16384
		"a{b":       int(crc16("a%7Bb") % Slots), // escaped first
	} {
		if got := r.Slot(tag); got != want {
			t.Errorf("Slot(%q) = %d, want %d", tag, got, want)
		}
	}
	if r.Cluster() {
		t.Error("a scripter that does not say it is a Cluster's reported as one")
	}
}

// errScripter fails every call.
type errScripter struct{ err error }

func (e errScripter) EvalSha(context.Context, string, []string, []string) (any, error) {
	return nil, e.err
}

func (e errScripter) Eval(context.Context, string, []string, []string) (any, error) {
	return nil, e.err
}
