package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestVersionsAgree checks that `make images` tags the images with what the installations pull:
// the charts' appVersion (their default image.tag; the versitygw chart's image is built and tagged
// with the others), the tags of the images in config/ and the Makefile's default VERSION (`make -s
// print-version`, without a release tag on HEAD) are one version. Otherwise `make images && make
// push` then `helm install` pulls a tag nobody pushed.
func TestVersionsAgree(t *testing.T) {
	versions := map[string]string{} // where → version
	for _, chart := range []string{"charts/cosi", "charts/cosi-driver", "charts/versitygw"} {
		data, err := os.ReadFile(filepath.Join(env.RepoRoot, chart, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		versions[chart+" appVersion"] = c.AppVersion
	}
	for _, k := range []string{"config/default", "config/driver/s3"} {
		for _, d := range deploymentsOf(t, kustomize(t, k)) {
			for _, c := range podOf(t, d).Spec.Containers {
				_, tag, ok := strings.Cut(strings.TrimPrefix(c.Image, "ghcr.io/kube-cosi/"), ":")
				if !ok {
					t.Errorf("%s: image %s has no tag", k, c.Image)
				}
				versions[k+" image "+c.Image] = tag
			}
		}
	}

	cmd := exec.Command("make", "-s", "print-version")
	cmd.Dir = env.RepoRoot
	for _, v := range os.Environ() {
		if !strings.HasPrefix(v, "VERSION=") && !strings.HasPrefix(v, "MAKEFLAGS=") {
			cmd.Env = append(cmd.Env, v)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -s print-version: %v", err)
	}
	tagged, _ := exec.Command("git", "-C", env.RepoRoot, "describe", "--tags", "--exact-match", "--match", "v*").Output()
	if len(tagged) > 0 {
		t.Logf("HEAD is tagged %s: the Makefile's VERSION is the tag, which must be the charts' too", tagged)
	}
	versions["Makefile VERSION"] = strings.TrimSpace(string(out))

	want := versions["charts/cosi appVersion"]
	if want == "" {
		t.Fatal("charts/cosi has no appVersion")
	}
	for where, v := range versions {
		if v != want {
			t.Errorf("%s is %q, want %q (charts/cosi's appVersion)", where, v, want)
		}
	}
}
