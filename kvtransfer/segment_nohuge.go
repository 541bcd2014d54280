//go:build unix && !linux

package kvtransfer

// adviseHugePages does nothing: huge-page advice is Linux only.
func adviseHugePages([]byte) {}
