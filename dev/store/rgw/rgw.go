// Package rgw runs a throwaway single-node Ceph cluster (mon, memstore OSD, radosgw) on
// 127.0.0.1, started by hack/ceph/rgw.sh in a directory of its own: the object store of the S3
// driver's rgw account back-end, for its tests and for the local environment. Ceph comes from
// Debian's packages (make ceph).
package rgw

import (
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// Start starts a cluster in dir with script (hack/ceph/rgw.sh) and radosgw on a free port. The
// script takes ten ports from it (RGW, the monitor, the OSDs): they are picked below the kernel's
// ephemeral range, where no outgoing connection takes them, and a start that loses one to another
// process anyway (two test packages start clusters at once) is tried again on others.
func Start(script, dir string) (*Cluster, error) {
	var c *Cluster
	for attempt := 1; ; attempt++ {
		port, err := portBlock(clusterPorts)
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c = &Cluster{script: script, Dir: dir, Endpoint: "http://" + addr}
		out, err := exec.Command(script, "start", dir, strconv.Itoa(port)).CombinedOutput()
		if err == nil {
			break
		}
		err = errors.Join(fmt.Errorf("%s start: %w\n%s", script, err, out), c.Stop())
		if attempt == 3 || !portTaken(string(out)) {
			return nil, err
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
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

// clusterPorts is how many consecutive ports rgw.sh takes from its PORT.
const clusterPorts = 10

// portBlock returns the first of n consecutive ports that are free on 127.0.0.1, between 20000 and
// 32000: below Linux's default ephemeral range (32768-60999), which outgoing connections take
// from.
func portBlock(n int) (int, error) {
	for range 100 {
		base := 20000 + mathrand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on 127.0.0.1 between 20000 and 32000", n)
}

// portTaken tells whether rgw.sh's output says a daemon lost its port to another process.
func portTaken(out string) bool {
	return strings.Contains(out, "already in use") || strings.Contains(out, "unable to bind") ||
		strings.Contains(out, "mon exited")
}
