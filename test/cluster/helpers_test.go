package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// store is the Versity S3 gateway running in the cluster: one Pod with its IAM service and its S3
// service (two containers of the project's versitygw image sharing the IAM socket), reached at
// its Pod address (no kube-proxy: docs/cluster.md).
type store struct {
	S3Endpoint, IAMEndpoint string
	RootKey, RootSecret     string
}

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

func startStore(t *testing.T) *store {
	t.Helper()
	ctx := context.Background()
	restrictedNamespace(t, storeNamespace)
	s := &store{RootKey: "root" + randomKey()[:8], RootSecret: randomKey()}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeNamespace, Name: "versitygw-root"},
		StringData: map[string]string{
			"ROOT_ACCESS_KEY_ID":     s.RootKey,
			"ROOT_SECRET_ACCESS_KEY": s.RootSecret,
			"VGW_QUIET":              "true",
		},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	mount := func(names ...string) []corev1.VolumeMount {
		var m []corev1.VolumeMount
		for _, n := range names {
			m = append(m, corev1.VolumeMount{Name: n, MountPath: "/" + n})
		}
		return m
	}
	container := func(name string, port int32, args ...string) corev1.Container {
		return corev1.Container{
			Name:            name,
			Image:           node.Images["versitygw"],
			ImagePullPolicy: corev1.PullIfNotPresent,
			Args:            append([]string{"-p", fmt.Sprintf(":%d", port), "--health", "/healthz"}, args...),
			EnvFrom: []corev1.EnvFromSource{
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}}},
			},
			Ports: []corev1.ContainerPort{{Name: name, ContainerPort: port}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}},
				PeriodSeconds: 1,
			},
			SecurityContext: restricted(),
		}
	}
	iam := container("iam", 7071, "iam", "--dir", "/iam", "--private-ports", "/socket/iam.sock")
	iam.VolumeMounts = mount("iam", "socket")
	s3 := container(
		"s3",
		7070,
		"--iam-standalone-endpoint",
		"/socket/iam.sock",
		"posix",
		"--versioning-dir",
		"/versions",
		"/data",
	)
	s3.VolumeMounts = mount("data", "versions", "socket")
	var volumes []corev1.Volume
	for _, v := range []string{"iam", "socket", "data", "versions"} {
		volumes = append(
			volumes,
			corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		)
	}
	labels := map[string]string{"app": "versitygw"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeNamespace, Name: "versitygw"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// The data is in the Pod's emptyDirs: never two Pods, never a replaced one.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{iam, s3},
					Volumes:    volumes,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				},
			},
		},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	var ip string
	eventually(t, 2*time.Minute, "the Versity store's Pod is Ready", func(ctx context.Context) error {
		pods, err := cs.CoreV1().Pods(storeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=versitygw"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ip = p.Status.PodIP
					return nil
				}
			}
		}
		return fmt.Errorf("%d Pods, none Ready", len(pods.Items))
	})
	s.S3Endpoint, s.IAMEndpoint = "http://"+ip+":7070", "http://"+ip+":7071"
	return s
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
