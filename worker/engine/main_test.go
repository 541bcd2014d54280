package engine_test

import (
	"os"
	"testing"
)

var packageTemp string

// TestMain gives the package one temporary directory for the generated
// tiny model, removed when the tests end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warden-engine-test-")
	if err != nil {
		panic(err)
	}
	packageTemp = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func tempDirForPackage() (string, error) { return packageTemp, nil }
