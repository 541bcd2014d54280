package kvtransfer

import "syscall"

// adviseHugePages asks for transparent huge pages on a segment's data
// region. It is best effort: tmpfs honours it only where the administrator
// set /sys/kernel/mm/transparent_hugepage/shmem_enabled to advise (or the
// mount has huge=advise); elsewhere it changes nothing.
func adviseHugePages(b []byte) { syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
