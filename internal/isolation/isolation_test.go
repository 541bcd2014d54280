//go:build !warden_nochecks

package isolation

import "testing"

// A normal build keeps the checks on whatever is called; only the
// benchmark tag can drop them.
func TestChecksCannotBeTurnedOffInANormalBuild(t *testing.T) {
	SetForBenchmark(false)
	if !Enabled() || Switchable || Refuse() != nil {
		t.Fatal("a normal build lets the isolation checks be switched off")
	}
}
