//go:build !warden_broken

package brokenmode

import "testing"

// A normal build cannot be broken on purpose, whatever the environment.
func TestNormalBuildIsNeverBroken(t *testing.T) {
	t.Setenv("WARDEN_BROKEN", "admission,shared-cache,release-without-drain")
	if Built || On(Admission) || On(SharedCache) || On(ReleaseWithoutDrain) {
		t.Fatal("a normal build has a deliberate failure switched on")
	}
}
