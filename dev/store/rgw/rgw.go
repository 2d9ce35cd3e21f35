// Package rgw runs a throwaway single-node Ceph cluster (mon, memstore OSD, radosgw) on
// 127.0.0.1, started by hack/ceph/rgw.sh in a directory of its own: the object store of the S3
// driver's rgw account back-end, for its tests and for the local environment. Ceph comes from
// Debian's packages (make ceph).
package rgw

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kube-cosi/cosi/dev/process"
)

// Cluster is a running Ceph cluster with radosgw.
type Cluster struct {
	// Endpoint is radosgw's http:// URL.
	Endpoint string
	// AccessKey and SecretKey are the admin user's credentials.
	AccessKey, SecretKey string
	// Dir holds the cluster's data and logs.
	Dir string

	script string
}

// Installed reports whether radosgw is on PATH.
func Installed() bool {
	_, err := exec.LookPath("radosgw")
	return err == nil
}

// Start starts a cluster in dir with script (hack/ceph/rgw.sh) and radosgw on a free port.
func Start(script, dir string) (*Cluster, error) {
	addr, err := process.FreeAddress()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	if _, err := strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("free address %s: %w", addr, err)
	}
	c := &Cluster{script: script, Dir: dir, Endpoint: "http://" + addr}
	out, err := exec.Command(script, "start", dir, port).CombinedOutput()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s start: %w\n%s", script, err, out), c.Stop())
	}
	data, err := os.ReadFile(c.AdminEnvFile())
	if err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID":
			c.AccessKey = v
		case "AWS_SECRET_ACCESS_KEY":
			c.SecretKey = v
		}
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return nil, errors.Join(fmt.Errorf("%s has no admin keys", c.AdminEnvFile()), c.Stop())
	}
	return c, nil
}

// AdminEnvFile holds the admin credentials as AWS_ACCESS_KEY_ID=... lines.
func (c *Cluster) AdminEnvFile() string { return filepath.Join(c.Dir, "admin.env") }

// Stop stops the cluster; Dir stays.
func (c *Cluster) Stop() error {
	if out, err := exec.Command(c.script, "stop", c.Dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%s stop: %w\n%s", c.script, err, out)
	}
	return nil
}
