package s3_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kube-cosi/cosi/dev/localenv"
	cephrgw "github.com/kube-cosi/cosi/dev/store/rgw"
)

// rgwCluster is a throwaway single-node Ceph cluster with radosgw (dev/store/rgw) in a temporary
// directory.
type rgwCluster struct {
	*cephrgw.Cluster
	dir, endpoint, accessKey, secretKey string
}

func startRGW() (*rgwCluster, error) {
	root, err := localenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cosi-rgw")
	if err != nil {
		return nil, err
	}
	c, err := cephrgw.Start(filepath.Join(root, "hack", "ceph", "rgw.sh"), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &rgwCluster{Cluster: c, dir: c.Dir, endpoint: c.Endpoint, accessKey: c.AccessKey, secretKey: c.SecretKey}, nil
}

func (c *rgwCluster) stop() {
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	_ = os.RemoveAll(c.dir)
}
