package lock

import (
	"testing"

	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// TestDefaultTTL: the default that lockdriver.BuildOptions applies is the
// one this package documents.
func TestDefaultTTL(t *testing.T) {
	o, err := lockdriver.BuildOptions[Option](nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.TTL != DefaultTTL || lockdriver.DefaultTTL != DefaultTTL {
		t.Errorf("BuildOptions' TTL %v, lockdriver.DefaultTTL %v, DefaultTTL %v: want them equal", o.TTL, lockdriver.DefaultTTL, DefaultTTL)
	}
}
