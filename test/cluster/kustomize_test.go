package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// overlay writes a kustomization over one of config/ as docs/install.md has admins write theirs:
// the images of this commit, the API server's address for Pods as on clusters without kube-proxy
// (docs/install.md: the node has one, so this keeps that path tested), and patches.
func overlay(t *testing.T, base string, images []string, envContainers map[string][]string, patches string) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes only relative paths to bases.
	rel, err := filepath.Rel(dir, filepath.Join(repo, base))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nimages:\n", rel)
	for _, name := range images {
		ref := node.Images[name]
		fmt.Fprintf(
			&b,
			"- name: ghcr.io/kube-cosi/%s\n  newName: %s\n  newTag: %s\n",
			name,
			ref[:strings.LastIndex(ref, ":")],
			imageTag(),
		)
	}
	b.WriteString("patches:\n")
	var env strings.Builder
	for _, e := range node.APIServerEnv() {
		fmt.Fprintf(&env, "            - {name: %s, value: %q}\n", e.Name, e.Value)
	}
	for deployment, containers := range envContainers {
		fmt.Fprintf(
			&b,
			"- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: %s, namespace: %s}\n"+
				"    spec:\n      template:\n        spec:\n          containers:\n",
			deployment,
			cosiNamespace,
		)
		for _, c := range containers {
			fmt.Fprintf(&b, "          - name: %s\n            env:\n%s", c, env.String())
		}
	}
	b.WriteString(patches)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestKustomize installs COSI and the S3 driver with kubectl apply -k, as docs/install.md says, and
// a tenant's application uses a bucket.
func TestKustomize(t *testing.T) {
	needNode(t)
	ctx := context.Background()
	s := theStore(t)
	restrictedNamespace(t, cosiNamespace)
	driverCredentials(t, s)
	cosi := overlay(
		t,
		"config/default",
		[]string{"cosi-controller"},
		map[string][]string{"cosi-controller": {"controller"}},
		"",
	)
	driver := overlay(
		t,
		"config/driver/s3",
		[]string{"cosi-driver-s3", "cosi-sidecar"},
		map[string][]string{"s3-cosi-driver": {"driver", "sidecar"}},
		fmt.Sprintf(`- target: {kind: Deployment, name: s3-cosi-driver}
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/args
      value:
      - --s3-endpoint=%s
      - --accounts=iam
      - --iam-endpoint=%s
      - --metrics-address=127.0.0.1:8082
      - --credentials-file=/etc/cosi/credentials/credentials
`, s.S3Endpoint, s.IAMEndpoint),
	)
	const tenant = "kustomize-tenant"
	restrictedNamespace(t, tenant)

	step(t, "install", func(t *testing.T) {
		start := time.Now()
		// --force-conflicts: the CRDs the Helm story kept are taken over, as an admin moving from
		// Helm to kustomize would.
		command(t, "kubectl", "apply", "--server-side", "--force-conflicts", "-k", cosi)
		eventually(t, time.Minute, "the CRDs are established", func(context.Context) error {
			_, err := tryCommand(
				"kubectl",
				"wait",
				"--for=condition=Established",
				"crd/bucketclaims.objectstorage.k8s.io",
				"--timeout=5s",
			)
			return err
		})
		command(t, "kubectl", "apply", "--server-side", "--force-conflicts", "-k", driver)
		classes(t)
		provision(t, tenant, appClaim)
		t.Logf("kubectl apply -k to a Provisioned BucketClaim and BucketAccess: %.1fs", time.Since(start).Seconds())
		waitDeployment(t, "cosi-controller")
		waitDeployment(t, "s3-cosi-driver")
	})

	step(t, "components run under their own ServiceAccounts in a restricted namespace", func(t *testing.T) {
		var ns corev1.Namespace
		if err := c.Get(ctx, clientKey(cosiNamespace), &ns); err != nil {
			t.Fatal(err)
		}
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
			t.Errorf("%s enforces Pod Security %q", cosiNamespace, got)
		}
		for selector, sa := range map[string]string{
			"app.kubernetes.io/name=cosi-controller": "cosi-controller",
			"app.kubernetes.io/instance=s3":          "s3-cosi-driver",
		} {
			pods, err := podsOf(ctx, selector)
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 2 {
				t.Errorf("%s: %d Pods, want 2", selector, len(pods))
			}
			for _, p := range pods {
				if p.Spec.ServiceAccountName != sa {
					t.Errorf("Pod %s runs as %q, want %q", p.Name, p.Spec.ServiceAccountName, sa)
				}
			}
		}
	})

	step(t, "an application puts and gets an object with the COSI Secret", func(t *testing.T) {
		if got := app(t, tenant,
			"put",
			"greeting",
			"hello from kustomize",
		); got != "put greeting=hello from kustomize" {
			t.Fatalf("app: %q", got)
		}
		if got := app(t, tenant, "get", "greeting"); got != "got greeting=hello from kustomize" {
			t.Fatalf("app: %q", got)
		}
	})
}

// driverCredentials creates the Secret with the store's admin key that the driver mounts, as
// docs/install.md says.
func driverCredentials(t *testing.T, s *store) {
	t.Helper()
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: "cosi-driver-s3-credentials"},
		StringData: map[string]string{
			"credentials": "AWS_ACCESS_KEY_ID=" + s.RootKey + "\nAWS_SECRET_ACCESS_KEY=" + s.RootSecret + "\n",
		},
	}
	if err := c.Create(context.Background(), creds); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
