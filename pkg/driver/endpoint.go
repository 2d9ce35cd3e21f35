package driver

import (
	"fmt"
	"io/fs"
	"strings"
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
