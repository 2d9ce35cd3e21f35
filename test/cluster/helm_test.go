package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cmdutil"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// A Pod of the project's image runs on the node as the non-root user the image names, under
// Pod Security "restricted", and prints the version the image was built with.
func TestProjectImageRuns(t *testing.T) {
	needNode(t)
	restrictedNamespace(t, "smoke")
	ref := node.Images["cosi-sanity"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "smoke", Name: "version"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "sanity", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"--version"},
			SecurityContext: restricted(),
		}}},
	}
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the Pod succeeds", func(ctx context.Context) error {
		p, err := cs.CoreV1().Pods("smoke").Get(ctx, "version", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if got := strings.TrimSpace(
		string(command(t, "kubectl", "-n", "smoke", "logs", "version")),
	); got != "cosi-sanity "+tag {
		t.Errorf("kubectl logs: %q, want %q", got, "cosi-sanity "+tag)
	}
}

// helmValues writes values for a chart: the images built for this commit, tag as their tag. Pods
// reach the API server through the kubernetes Service, as on any cluster (kube-proxy on the node).
func helmValues(t *testing.T, tag string, extra map[string]any) string {
	t.Helper()
	ref := node.Images["cosi-controller"]
	v := map[string]any{
		"image": map[string]any{"registry": ref[:strings.LastIndex(ref, "/")], "tag": tag},
	}
	for k, x := range extra {
		v[k] = x
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func driverValues(t *testing.T, s *store, tag string) string {
	return helmValues(t, tag, map[string]any{"driver": map[string]any{"args": []string{
		"--s3-endpoint=" + s.S3Endpoint, "--accounts=iam", "--iam-endpoint=" + s.IAMEndpoint,
		"--metrics-address=127.0.0.1:8082",
	}}})
}

func imageTag() string {
	ref := node.Images["cosi-controller"]
	return ref[strings.LastIndex(ref, ":")+1:]
}

// TestHelm installs COSI and the S3 driver with Helm as docs/install.md says and follows a user
// and an admin through a release's life: buckets, an application, a failover, an upgrade, an
// uninstall and a reinstall.
func TestHelm(t *testing.T) {
	needNode(t)
	ctx := context.Background()
	s := theStore(t)
	restrictedNamespace(t, cosiNamespace)
	driverCredentials(t, s)
	tag := imageTag()
	cosiValues, s3Values := helmValues(t, tag, nil), driverValues(t, s, tag)
	const tenant = "photos"
	restrictedNamespace(t, tenant)
	// The next story installs with kustomize: remove the tenant's objects while COSI runs, then
	// the releases (the CRDs stay).
	t.Cleanup(func() { uninstallHelm(t, tenant) })

	step(t, "install", func(t *testing.T) {
		start := time.Now()
		command(t, "helm", "install", "cosi", filepath.Join(repo, "charts/cosi"), "-n", cosiNamespace, "-f", cosiValues)
		command(
			t,
			"helm",
			"install",
			"s3",
			filepath.Join(repo, "charts/cosi-driver"),
			"-n",
			cosiNamespace,
			"-f",
			s3Values,
		)
		classes(t)
		provision(t, tenant, appClaim)
		t.Logf("helm install to a Provisioned BucketClaim and BucketAccess: %.1fs", time.Since(start).Seconds())
		waitDeployment(t, "cosi-controller")
		waitDeployment(t, "s3-cosi-driver")
	})

	step(t, "components run under their own ServiceAccounts", func(t *testing.T) {
		for selector, sa := range map[string]string{
			"app.kubernetes.io/name=cosi-controller": "cosi-controller",
			"app.kubernetes.io/instance=s3":          "s3-cosi-driver",
		} {
			pods, err := podsOf(ctx, selector)
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 2 {
				t.Errorf("%s: %d Pods, want 2 replicas", selector, len(pods))
			}
			for _, p := range pods {
				if p.Spec.ServiceAccountName != sa || p.Spec.HostNetwork {
					t.Errorf(
						"Pod %s runs as ServiceAccount %q (hostNetwork %v), want %q in the Pod network",
						p.Name,
						p.Spec.ServiceAccountName,
						p.Spec.HostNetwork,
						sa,
					)
				}
			}
		}
	})

	step(t, "controller and sidecar keep their Go memory under the container's limit", func(t *testing.T) {
		for selector, container := range map[string]string{
			"app.kubernetes.io/name=cosi-controller": "controller",
			"app.kubernetes.io/instance=s3":          "sidecar",
		} {
			pods, err := podsOf(ctx, selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				memoryLimitLogged(t, p, container)
			}
		}
	})

	step(t, "an application puts and gets an object with the COSI Secret", func(t *testing.T) {
		if got := app(t, tenant, "put", "hello", "world"); got != "put hello=world" {
			t.Fatalf("app: %q", got)
		}
	})

	step(t, "Pod Security restricted is enforced on the namespace", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: "root"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: node.Images["cosi-controller"]}}}}
		err := c.Create(ctx, pod, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
			t.Fatalf("a Pod without a restricted securityContext in %s: %v, want refused by Pod Security", cosiNamespace, err)
		}
	})

	step(t, "leader election moves when the leader Pod is deleted", func(t *testing.T) {
		for _, lease := range []string{controller.LeaseName, sidecar.LeaseName(driverName)} {
			leader := leaderPod(t, lease)
			if err := cs.CoreV1().Pods(cosiNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			eventually(t, 2*time.Minute, "Lease "+lease+" held by another Pod", func(ctx context.Context) error {
				if now := holder(ctx, lease); now == leader || now == "" {
					return fmt.Errorf("held by %q", now)
				}
				return nil
			})
			t.Logf("Lease %s moved from %s to %s in %.1fs", lease, leader, leaderPod(t, lease), time.Since(start).Seconds())
		}
		provision(t, tenant, "after-failover")
	})

	step(t, "helm upgrade to a new image keeps every bucket and access", func(t *testing.T) {
		before := accessState(t, tenant)
		newTag := tag + "-upgrade"
		for _, name := range []string{"cosi-controller", "cosi-sidecar", "cosi-driver-s3"} {
			ref := node.Images[name]
			if err := node.TagImage(ctx, ref, strings.TrimSuffix(ref, tag)+newTag); err != nil {
				t.Fatal(err)
			}
		}
		command(
			t,
			"helm",
			"upgrade",
			"cosi",
			filepath.Join(repo, "charts/cosi"),
			"-n",
			cosiNamespace,
			"-f",
			helmValues(t, newTag, nil),
		)
		command(
			t,
			"helm",
			"upgrade",
			"s3",
			filepath.Join(repo, "charts/cosi-driver"),
			"-n",
			cosiNamespace,
			"-f",
			driverValues(t, s, newTag),
		)
		waitDeployment(t, "cosi-controller")
		waitDeployment(t, "s3-cosi-driver")
		for _, selector := range []string{"app.kubernetes.io/name=cosi-controller", "app.kubernetes.io/instance=s3"} {
			pods, err := podsOf(ctx, selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				for _, ctr := range p.Spec.Containers {
					if !strings.HasSuffix(ctr.Image, ":"+newTag) {
						t.Errorf("after the upgrade Pod %s runs %s", p.Name, ctr.Image)
					}
				}
			}
		}
		provision(t, tenant, "after-upgrade")
		assertKept(t, tenant, before)
	})

	step(t, "helm uninstall then install keeps the CRDs, buckets and data", func(t *testing.T) {
		before := accessState(t, tenant)
		command(t, "helm", "uninstall", "s3", "-n", cosiNamespace, "--wait")
		command(t, "helm", "uninstall", "cosi", "-n", cosiNamespace, "--wait")
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: "bucketclaims.objectstorage.k8s.io"}, &crd); err != nil {
			t.Fatalf("the BucketClaim CRD after helm uninstall: %v", err)
		}
		var claims cosiapi.BucketClaimList
		if err := c.List(ctx, &claims, client.InNamespace(tenant)); err != nil || len(claims.Items) != len(before) {
			t.Fatalf("after helm uninstall: %d claims (%v), want %d", len(claims.Items), err, len(before))
		}
		command(t, "helm", "install", "cosi", filepath.Join(repo, "charts/cosi"), "-n", cosiNamespace, "-f", cosiValues)
		command(
			t,
			"helm",
			"install",
			"s3",
			filepath.Join(repo, "charts/cosi-driver"),
			"-n",
			cosiNamespace,
			"-f",
			s3Values,
		)
		waitDeployment(t, "cosi-controller")
		waitDeployment(t, "s3-cosi-driver")
		provision(t, tenant, "after-reinstall")
		assertKept(t, tenant, before)
	})
}

// memoryLimitLogged checks that the named container of Pod p logged the Go memory limit it set:
// 0.9 of its container's memory limit, as the kernel shows it to the container.
func memoryLimitLogged(t *testing.T, p corev1.Pod, container string) {
	t.Helper()
	var limit int64
	for _, ctr := range p.Spec.Containers {
		if ctr.Name == container {
			limit = ctr.Resources.Limits.Memory().Value()
		}
	}
	if limit == 0 {
		t.Fatalf("Pod %s: no container %q with a memory limit", p.Name, container)
	}
	logs := string(command(t, "kubectl", "-n", p.Namespace, "logs", p.Name, "-c", container))
	for line := range strings.Lines(logs) {
		var entry struct {
			Msg       string `json:"msg"`
			Limit     int64  `json:"limitBytes"`
			Container int64  `json:"containerLimitBytes"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != "Go memory limit set from the container's" {
			continue
		}
		if entry.Container != limit || entry.Limit != int64(float64(limit)*cmdutil.DefaultMemoryLimitRatio) {
			t.Errorf("Pod %s container %s: Go memory limit %d of container limit %d, want %.1f of %d", p.Name,
				container, entry.Limit, entry.Container, cmdutil.DefaultMemoryLimitRatio, limit)
		}
		t.Logf("Pod %s container %s: Go memory limit %d bytes (container limit %d)", p.Name, container, entry.Limit,
			entry.Container)
		return
	}
	t.Errorf("Pod %s container %s logged no Go memory limit", p.Name, container)
}

func holder(ctx context.Context, lease string) string {
	var l coordinationv1.Lease
	if err := c.Get(
		ctx,
		client.ObjectKey{Namespace: cosiNamespace, Name: lease},
		&l,
	); err != nil ||
		l.Spec.HolderIdentity == nil {
		return ""
	}
	// controller-runtime's identity is <hostname>_<uuid>; the hostname is the Pod's name.
	id, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return id
}

func leaderPod(t *testing.T, lease string) string {
	t.Helper()
	var h string
	eventually(t, time.Minute, "Lease "+lease+" has a holder", func(ctx context.Context) error {
		if h = holder(ctx, lease); h == "" {
			return errNotYet
		}
		return nil
	})
	return h
}

// accessState is what a tenant sees of each access: the bucket of each claim and the key in each
// Secret.
func accessState(t *testing.T, namespace string) map[string]string {
	t.Helper()
	ctx := context.Background()
	var claims cosiapi.BucketClaimList
	if err := c.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, bc := range claims.Items {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: bc.Name + "-creds"}, &s); err != nil {
			t.Fatal(err)
		}
		state[bc.Name] = bc.Status.BoundBucketName + " " + string(
			s.Data["BUCKET_NAME"],
		) + " " + string(
			s.Data["AWS_ACCESS_KEY_ID"],
		)
	}
	return state
}

// assertKept checks that every claim and access of before is still provisioned with the same
// bucket and key, and that the application still reads what it wrote.
func assertKept(t *testing.T, namespace string, before map[string]string) {
	t.Helper()
	after := accessState(t, namespace)
	for claim, was := range before {
		waitProvisioned(t, namespace, claim)
		if after[claim] != was {
			t.Errorf("claim %s: bucket, bucket name and key were %q, now %q", claim, was, after[claim])
		}
	}
	if got := app(t, namespace, "get", "hello"); got != "got hello=world" {
		t.Errorf("the application reads %q, want %q", got, "got hello=world")
	}
}

func uninstallHelm(t *testing.T, tenant string) {
	ctx := context.Background()
	for _, o := range []client.Object{&cosiapi.BucketAccess{}, &cosiapi.BucketClaim{}} {
		if err := c.DeleteAllOf(ctx, o, client.InNamespace(tenant)); err != nil {
			t.Error(err)
		}
	}
	eventually(t, 2*time.Minute, "the tenant's claims and accesses are gone", func(ctx context.Context) error {
		var claims cosiapi.BucketClaimList
		var accesses cosiapi.BucketAccessList
		if err := c.List(ctx, &claims, client.InNamespace(tenant)); err != nil {
			return err
		}
		if err := c.List(ctx, &accesses, client.InNamespace(tenant)); err != nil {
			return err
		}
		if n := len(claims.Items) + len(accesses.Items); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	for _, release := range []string{"s3", "cosi"} {
		if _, err := tryCommand(
			"helm",
			"uninstall",
			release,
			"-n",
			cosiNamespace,
			"--wait",
		); err != nil &&
			!strings.Contains(err.Error(), "not found") {
			t.Error(err)
		}
	}
}
