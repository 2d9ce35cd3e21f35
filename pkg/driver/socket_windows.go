package driver

import (
	"fmt"
	"io/fs"
	"net"
)

// bindSocket: COSI drivers serve on Unix-like systems only.
func bindSocket(path string, _ fs.FileMode) (*net.UnixListener, error) {
	return nil, fmt.Errorf("listening on %s: the driver SDK does not serve on Windows", path)
}
