package fallback_test

import (
	"os"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
