package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
)

const (
	cosiNamespace  = "cosi-system"
	storeNamespace = "s3-store"
	driverName     = "s3.cosi.kube-cosi.io"
)

// command runs bin/<name> (kubectl, helm) as the cluster admin and returns its standard output.
func command(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := tryCommand(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tryCommand(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf(
			"%s %s: %w\n%s%s",
			name,
			strings.Join(args, " "),
			err,
			stdout.String(),
			stderr.String(),
		)
	}
	return stdout.Bytes(), nil
}

// eventually calls f until it returns nil, for up to timeout.
func eventually(t *testing.T, timeout time.Duration, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var err error
	for {
		if err = f(ctx); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// restrictedNamespace creates a namespace that enforces Pod Security "restricted", as an admin
// who follows docs/install.md does.
func restrictedNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// restricted is the security context Pod Security "restricted" asks of a container.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func randomKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// store is the Versity S3 gateway running in the cluster, installed as an admin installs it: the
// chart charts/versitygw, release storeRelease in storeNamespace (one Pod with the IAM service and
// the S3 gateway). Pods, the S3 driver's among them, reach it by its Service's name (S3Endpoint,
// IAMEndpoint: the node's cluster DNS answers them); the test process on the host, which does not
// ask that DNS, at the Service's cluster IP (HostS3Endpoint, HostIAMEndpoint: kube-proxy routes it
// on the node).
type store struct {
	S3Endpoint, IAMEndpoint         string
	HostS3Endpoint, HostIAMEndpoint string
	RootKey, RootSecret             string
}

// storeRelease is the store's Helm release, which names its Service (and every object of it).
const storeRelease = "versitygw"

var theStoreOnce *store

// theStore starts the store on first use; the stories share it.
func theStore(t *testing.T) *store {
	t.Helper()
	if theStoreOnce == nil {
		theStoreOnce = startStore(t)
	}
	return theStoreOnce
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

// startStore installs the store as the chart's README says: the root key in a Secret of the
// admin's first, then the chart with the images built for this commit. Without persistence: the
// node has no StorageClass, and the store lives as long as the tier's node.
func startStore(t *testing.T) *store {
	t.Helper()
	ctx := context.Background()
	restrictedNamespace(t, storeNamespace)
	s := &store{RootKey: "root" + randomKey()[:8], RootSecret: randomKey()}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeNamespace, Name: "versitygw-root"},
		StringData: map[string]string{"ROOT_ACCESS_KEY_ID": s.RootKey, "ROOT_SECRET_ACCESS_KEY": s.RootSecret},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ref := node.Images["versitygw"]
	slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":")
	values := writeValues(t, map[string]any{
		"image":           map[string]any{"registry": ref[:slash], "name": ref[slash+1 : colon], "tag": ref[colon+1:]},
		"rootCredentials": map[string]any{"existingSecret": secret.Name},
		"persistence":     map[string]any{"enabled": false},
	})
	if _, err := tryCommand("helm", "install", storeRelease, filepath.Join(repo, "charts/versitygw"),
		"-n", storeNamespace, "-f", values, "--wait", "--timeout", "2m"); err != nil {
		pods, _ := tryCommand("kubectl", "-n", storeNamespace, "describe", "pods")
		t.Fatalf("the Versity store: %v\n%s", err, pods)
	}
	svc, err := cs.CoreV1().Services(storeNamespace).Get(ctx, storeRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inCluster := func(port string) string {
		return fmt.Sprintf("http://%s.%s.svc.cluster.local:%s", svc.Name, storeNamespace, port)
	}
	onHost := func(port string) string { return "http://" + net.JoinHostPort(svc.Spec.ClusterIP, port) }
	s.S3Endpoint, s.IAMEndpoint = inCluster("7070"), inCluster("7071")
	s.HostS3Endpoint, s.HostIAMEndpoint = onHost("7070"), onHost("7071")
	return s
}

// writeValues writes Helm values into a file of the test's and returns its path.
func writeValues(t *testing.T, v map[string]any) string {
	t.Helper()
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

// waitDeployment waits until every replica of the COSI Deployment runs its current template.
func waitDeployment(t *testing.T, name string) {
	t.Helper()
	command(t, "kubectl", "-n", cosiNamespace, "rollout", "status", "deployment/"+name, "--timeout=3m")
}

// classes creates the BucketClass and BucketAccessClass of the S3 driver.
func classes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		objects.BucketClass("s3-retain", driverName, cosiapi.DeletionPolicyRetain),
		objects.BucketAccessClass("s3-key", driverName),
	} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// provision creates a BucketClaim and a read-write BucketAccess to it in namespace, and waits until
// both are provisioned and the Secret is there.
func provision(t *testing.T, namespace, claim string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, objects.BucketClaim(namespace, claim, "s3-retain", objects.S3)); err != nil {
		t.Fatal(err)
	}
	access := objects.BucketAccess(namespace, claim, "s3-key",
		objects.Grant(claim, claim+"-creds", cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}))
	if err := c.Create(ctx, access); err != nil {
		t.Fatal(err)
	}
	waitProvisioned(t, namespace, claim)
}

func waitProvisioned(t *testing.T, namespace, claim string) {
	t.Helper()
	eventually(
		t,
		3*time.Minute,
		"BucketClaim and BucketAccess "+namespace+"/"+claim+" provisioned",
		func(ctx context.Context) error {
			var bc cosiapi.BucketClaim
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, &bc); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(bc.Status.Conditions, cosiapi.ConditionProvisioned) {
				return fmt.Errorf("claim: %v", bc.Status.Conditions)
			}
			var ba cosiapi.BucketAccess
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, &ba); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(ba.Status.Conditions, cosiapi.ConditionProvisioned) {
				return fmt.Errorf("access: %v", ba.Status.Conditions)
			}
			var s corev1.Secret
			return c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim + "-creds"}, &s)
		},
	)
}

// appClaim is the claim the application's bucket comes from; its Secret is appClaim-creds.
const appClaim = "uploads"

// app runs the application image in namespace with envFrom on appClaim's Secret, to completion,
// and returns its output: what a workload of the bucket sees.
func app(t *testing.T, namespace string, args ...string) string {
	t.Helper()
	return appWith(t, namespace, appClaim+"-creds", args...)
}

// appWith is app with the Secret secret.
func appWith(t *testing.T, namespace, secret string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	name := "app-" + randomKey()[:6]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{
					Name:            "app",
					Image:           node.Images["cosi-test-app"],
					ImagePullPolicy: corev1.PullIfNotPresent,
					Args:            args,
					EnvFrom: []corev1.EnvFromSource{
						{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}},
					},
					SecurityContext: restricted(),
				},
			},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	eventually(t, 2*time.Minute, "Pod "+namespace+"/"+name+" completes", func(ctx context.Context) error {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if phase = p.Status.Phase; phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	logs := string(command(t, "kubectl", "-n", namespace, "logs", name))
	if phase != corev1.PodSucceeded {
		t.Fatalf("app %v failed: %s", args, logs)
	}
	return strings.TrimSpace(logs)
}

// podsOf lists the Pods in the COSI namespace that selector selects and are not being deleted.
func podsOf(ctx context.Context, selector string) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(cosiNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// step runs one step of a story as a subtest; the story stops at the first failed step, whose
// followers would only fail for it.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}
