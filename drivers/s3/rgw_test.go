package s3_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kube-cosi/cosi/internal/testenv"
)

// rgwCluster is a throwaway single-node Ceph cluster (mon, memstore OSD, radosgw) on 127.0.0.1,
// started by hack/ceph/rgw.sh in a temporary directory.
type rgwCluster struct {
	script, dir, endpoint, accessKey, secretKey string
}

func startRGW() (*rgwCluster, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cosi-rgw")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := &rgwCluster{script: filepath.Join(root, "hack", "ceph", "rgw.sh"), dir: dir, endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	out, err := exec.Command(c.script, "start", dir, strconv.Itoa(port)).CombinedOutput()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("%s start: %w\n%s", c.script, err, out)
	}
	env, err := os.ReadFile(filepath.Join(dir, "admin.env"))
	if err != nil {
		c.stop()
		return nil, err
	}
	for _, line := range strings.Split(string(env), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID":
			c.accessKey = v
		case "AWS_SECRET_ACCESS_KEY":
			c.secretKey = v
		}
	}
	if c.accessKey == "" || c.secretKey == "" {
		c.stop()
		return nil, fmt.Errorf("%s/admin.env has no admin keys", dir)
	}
	return c, nil
}

func (c *rgwCluster) stop() {
	if out, err := exec.Command(c.script, "stop", c.dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "%s stop: %v\n%s", c.script, err, out)
	}
	_ = os.RemoveAll(c.dir)
}
