package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"
)

// EndpointEnv is the environment variable that names the driver's endpoint (COSI spec,
// "COSI_ENDPOINT").
const EndpointEnv = "COSI_ENDPOINT"

// DefaultSocketMode is the mode of the driver's socket: only the driver's user can connect. Deploy
// the sidecar as the same user, or widen the mode (for example 0o660 with a shared fsGroup).
const DefaultSocketMode fs.FileMode = 0o600

// ParseEndpoint checks a COSI endpoint and returns the path of its Unix socket. The COSI spec
// allows only Unix domain sockets, written unix:///absolute/path.sock; the path must end in ".sock".
func ParseEndpoint(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return "", fmt.Errorf("endpoint %q: only unix:// endpoints are allowed (unix:///path/to/driver.sock)", endpoint)
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute (unix:///path/to/driver.sock)", endpoint)
	}
	if !strings.HasSuffix(path, ".sock") || len(path) <= len("/.sock") {
		return "", fmt.Errorf("endpoint %q: the socket path must end in .sock", endpoint)
	}
	return path, nil
}

// listen creates the Unix socket at path with the given mode. An existing socket is removed only
// if nothing accepts connections on it (a stale socket left by a crashed driver); a live socket, or
// a file that is not a socket, is an error and is left alone. The socket's directory must exist:
// drivers do not create files or directories next to their socket (COSI spec, "Filesystem").
func listen(path string, mode fs.FileMode) (net.Listener, error) {
	info, err := os.Lstat(path)
	switch {
	case err == nil:
		if info.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
		}
		conn, dialErr := net.DialTimeout("unix", path, time.Second)
		if dialErr == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("%s is in use: another process is serving on it", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}

	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The socket exists with the process umask for an instant before this; its directory is what
	// keeps strangers out meanwhile (the sidecar owns it, per the COSI spec).
	if err := os.Chmod(path, mode); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("restricting socket mode: %w", err)
	}
	return lis, nil
}
