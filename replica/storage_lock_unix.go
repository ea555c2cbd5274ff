//go:build unix

package replica

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes the lock Badger takes on dir (badger.acquireDirectoryLock:
// an exclusive, non-blocking flock on the directory itself), so that what
// OpenStorage repairs before Badger opens the directory is not in use by
// another process, nor by a Storage of this process that is still closing.
// The lock goes with the returned file: close it to release. inUse reports
// that someone else holds it.
func lockDir(dir string) (f *os.File, inUse bool, err error) {
	f, err = os.Open(dir)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, errors.Is(err, syscall.EWOULDBLOCK), err
	}
	return f, false, nil
}

// lockDirSupported: the repairs run only where the lock is Badger's.
const lockDirSupported = true
