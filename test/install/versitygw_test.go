package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The versitygw chart: an example store to try COSI with (not part of COSI), which the cluster
// tier installs as its store. Its documented release: versitygw, in storeNamespace.
const (
	versitygwChart = "charts/versitygw"
	storeNamespace = "s3-store"
	rootSecret     = "versitygw-root"
)

// versitygwRendering is what the chart renders, typed.
type versitygwRendering struct {
	kinds      []string // sorted
	deployment *appsv1.Deployment
	service    *corev1.Service
	pvc        *corev1.PersistentVolumeClaim
	// raw is the rendering as helm printed it; unstructured is its Deployment.
	raw          []byte
	unstructured *unstructured.Unstructured
}

// renderVersitygw renders the chart as release into storeNamespace with the root Secret named and
// the values of set (name=value each).
func renderVersitygw(t *testing.T, release string, set ...string) versitygwRendering {
	t.Helper()
	set = append([]string{"rootCredentials.existingSecret=" + rootSecret}, set...)
	raw := helmTemplateIn(t, storeNamespace, versitygwChart, release, "--set", strings.Join(set, ","))
	r := versitygwRendering{raw: raw}
	for _, o := range decode(t, raw) {
		r.kinds = append(r.kinds, o.GetKind())
		var into any
		switch o.GetKind() {
		case "Deployment":
			r.deployment, r.unstructured = &appsv1.Deployment{}, o
			into = r.deployment
		case "Service":
			r.service = &corev1.Service{}
			into = r.service
		case "PersistentVolumeClaim":
			r.pvc = &corev1.PersistentVolumeClaim{}
			into = r.pvc
		default: // a Secret above all: the chart never makes credentials
			t.Fatalf("the chart renders a %s", o.GetKind())
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(r.kinds)
	if r.deployment == nil || r.service == nil {
		t.Fatalf("rendered %v, want a Deployment and a Service at least", r.kinds)
	}
	return r
}

// container returns the container of the Deployment's Pod named name.
func (r versitygwRendering) container(t *testing.T, name string) corev1.Container {
	t.Helper()
	for _, c := range r.deployment.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// notes returns the chart's NOTES.txt as helm install prints it (a client-side dry run).
func notes(t *testing.T, release string, set ...string) string {
	t.Helper()
	set = append([]string{"rootCredentials.existingSecret=" + rootSecret}, set...)
	out, err := helm("install", release, filepath.Join(env.RepoRoot, versitygwChart), "--namespace", storeNamespace,
		"--dry-run=client", "--set", strings.Join(set, ","))
	if err != nil {
		t.Fatal(err)
	}
	_, n, ok := strings.Cut(string(out), "\nNOTES:\n")
	if !ok {
		t.Fatalf("helm install --dry-run printed no NOTES:\n%s", out)
	}
	return n
}

// storeNamespaceRestricted creates storeNamespace enforcing Pod Security "restricted", as the
// chart's README says.
func storeNamespaceRestricted(t *testing.T) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   storeNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestVersitygwRootSecretRequired: the chart renders nothing without rootCredentials.existingSecret,
// saying so, and never a credential of its own: no Secret, and both containers read exactly the
// Secret's two keys.
func TestVersitygwRootSecretRequired(t *testing.T) {
	chart := filepath.Join(env.RepoRoot, versitygwChart)
	for _, args := range [][]string{nil, {"--set", "persistence.enabled=false"}} {
		_, err := helm(append([]string{"template", "versitygw", chart}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "rootCredentials.existingSecret is required") {
			t.Errorf("helm template %v without rootCredentials.existingSecret: %v, want it refused naming the value",
				args, err)
		}
	}
	_, err := helm("template", "versitygw", chart, "--set", "rootCredentials.existingSecret=Root_Key")
	if err == nil || !strings.Contains(err.Error(), "/rootCredentials/existingSecret") {
		t.Errorf("a Secret name that is not one: %v, want the schema to refuse it", err)
	}

	r := renderVersitygw(t, "versitygw") // which fails on any kind but its three: a Secret among them
	want := []corev1.EnvVar{rootKeyEnv("ROOT_ACCESS_KEY_ID"), rootKeyEnv("ROOT_SECRET_ACCESS_KEY")}
	for _, name := range []string{"iam", "s3"} {
		c := r.container(t, name)
		if len(c.EnvFrom) > 0 || !equalYAML(t, c.Env, want) {
			t.Errorf("container %s: env %v, envFrom %v; want only the two keys of Secret %s", name, c.Env, c.EnvFrom,
				rootSecret)
		}
	}
}

func rootKeyEnv(key string) corev1.EnvVar {
	return corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: rootSecret}, Key: key,
	}}}
}

// TestVersitygwPersistence: data/, versions/ and iam/ are subPaths of one volume: by default a PVC
// of the chart (class and size as set, kept on helm uninstall), or an existing claim, or with
// persistence off an emptyDir, which NOTES.txt warns of. Every rendering is sent to the API server
// with a dry run, and its Pod is admitted under Pod Security "restricted".
func TestVersitygwPersistence(t *testing.T) {
	ctx := context.Background()
	storeNamespaceRestricted(t)
	for _, c := range []struct {
		name  string
		set   []string
		claim string // the Pod's claim; "" for an emptyDir
		// The chart's PVC, or none: its class ("" none) and size.
		pvc         bool
		class, size string
	}{
		{name: "default", claim: "versitygw-data", pvc: true, size: "10Gi"},
		{
			name: "a class and a size", set: []string{"persistence.storageClassName=fast", "persistence.size=50Gi"},
			claim: "versitygw-data", pvc: true, class: "fast", size: "50Gi",
		},
		{name: "an existing claim", set: []string{"persistence.existingClaim=made-by-hand"}, claim: "made-by-hand"},
		{name: "off", set: []string{"persistence.enabled=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := renderVersitygw(t, "versitygw", c.set...)
			if (r.pvc != nil) != c.pvc {
				t.Fatalf("rendered %v, want a PVC: %v", r.kinds, c.pvc)
			}
			if r.pvc != nil {
				p := r.pvc
				if p.Name != "versitygw-data" || p.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("PVC %s, annotations %v: want versitygw-data, kept on helm uninstall", p.Name, p.Annotations)
				}
				var want *string
				if c.class != "" {
					want = &c.class
				}
				if got := p.Spec.StorageClassName; !equalYAML(t, got, want) {
					t.Errorf("storageClassName %v, want %q (none: the cluster's default)", ptr.Deref(got, "<none>"), c.class)
				}
				if got := p.Spec.Resources.Requests[corev1.ResourceStorage]; !got.Equal(resource.MustParse(c.size)) {
					t.Errorf("size %s, want %s", got.String(), c.size)
				}
				if !slices.Equal(p.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
					t.Errorf("access modes %v, want ReadWriteOnce", p.Spec.AccessModes)
				}
			}
			volumes := map[string]corev1.VolumeSource{}
			for _, v := range r.deployment.Spec.Template.Spec.Volumes {
				volumes[v.Name] = v.VolumeSource
			}
			store := volumes["store"]
			switch {
			case c.claim == "" && (store.EmptyDir == nil || store.PersistentVolumeClaim != nil):
				t.Errorf("volume store %+v, want an emptyDir", store)
			case c.claim != "" && (store.PersistentVolumeClaim == nil || store.PersistentVolumeClaim.ClaimName != c.claim):
				t.Errorf("volume store %+v, want the claim %s", store, c.claim)
			}
			if s := volumes["socket"]; s.EmptyDir == nil || len(volumes) != 2 {
				t.Errorf("volumes %v, want store and the socket's emptyDir", volumes)
			}
			for name, want := range map[string][]corev1.VolumeMount{
				"iam": {{Name: "store", MountPath: "/iam", SubPath: "iam"}, {Name: "socket", MountPath: "/socket"}},
				"s3": {
					{Name: "store", MountPath: "/data", SubPath: "data"},
					{Name: "store", MountPath: "/versions", SubPath: "versions"},
					{Name: "socket", MountPath: "/socket"},
				},
			} {
				if got := r.container(t, name).VolumeMounts; !equalYAML(t, got, want) {
					t.Errorf("container %s mounts %v, want %v", name, got, want)
				}
			}
			warned := strings.Contains(notes(t, "versitygw", c.set...), "WARNING: persistence.enabled=false")
			if warned != (c.claim == "") {
				t.Errorf("NOTES.txt warns that the data dies with the Pod: %v, want %v", warned, c.claim == "")
			}
			apply(t, versitygwChart, r.raw, "--dry-run=server")
			admittedRestricted(ctx, t, r.unstructured)
		})
	}
}

// TestVersitygwService: the Service is named after the release (Helm's usual fullname), has the
// ports s3 (7070) and iam (7071) of the containers of those names, and selects the Pod; NOTES.txt
// prints the endpoints by the Service's name and the S3 driver's flags. One replica, replaced by
// stopping it first, with the two containers wired as the cluster tier's hand-made store was.
func TestVersitygwService(t *testing.T) {
	for _, c := range []struct {
		release string
		set     []string
		name    string
	}{
		{release: "versitygw", name: "versitygw"},
		{release: "store", name: "store-versitygw"},
		{release: "store", set: []string{"fullnameOverride=objects"}, name: "objects"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := renderVersitygw(t, c.release, c.set...)
			svc := r.service
			if svc.Name != c.name || r.deployment.Name != c.name || svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("Service %s (%s), Deployment %s: want both %s, ClusterIP", svc.Name, svc.Spec.Type,
					r.deployment.Name, c.name)
			}
			want := []corev1.ServicePort{
				{Name: "s3", Port: 7070, TargetPort: intstr.FromString("s3"), Protocol: corev1.ProtocolTCP},
				{Name: "iam", Port: 7071, TargetPort: intstr.FromString("iam"), Protocol: corev1.ProtocolTCP},
			}
			if !equalYAML(t, svc.Spec.Ports, want) {
				t.Errorf("Service ports %v, want %v", svc.Spec.Ports, want)
			}
			for _, p := range want {
				ports := r.container(t, p.Name).Ports
				if len(ports) != 1 || ports[0].Name != p.Name || ports[0].ContainerPort != p.Port {
					t.Errorf("container %s: ports %v, want %s on %d", p.Name, ports, p.Name, p.Port)
				}
			}
			podLabels := r.deployment.Spec.Template.Labels
			if len(svc.Spec.Selector) == 0 {
				t.Error("the Service selects nothing")
			}
			for k, v := range svc.Spec.Selector {
				if podLabels[k] != v {
					t.Errorf("the Service selects %s=%s, the Pod has %q", k, v, podLabels[k])
				}
			}
			if !equalYAML(t, r.deployment.Spec.Selector.MatchLabels, svc.Spec.Selector) {
				t.Errorf("Deployment selector %v, Service selector %v", r.deployment.Spec.Selector.MatchLabels,
					svc.Spec.Selector)
			}
			d := r.deployment.Spec
			if ptr.Deref(d.Replicas, 1) != 1 || d.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("replicas %v, strategy %s: want 1, Recreate", ptr.Deref(d.Replicas, 1), d.Strategy.Type)
			}

			s3 := fmt.Sprintf("http://%s.%s.svc.cluster.local:7070", c.name, storeNamespace)
			iam := fmt.Sprintf("http://%s.%s.svc.cluster.local:7071", c.name, storeNamespace)
			n := notes(t, c.release, c.set...)
			for _, line := range []string{
				"S3:          " + s3, "IAM and STS: " + iam,
				"--s3-endpoint=" + s3, "--accounts=iam", "--iam-endpoint=" + iam,
				"driver.args={--s3-endpoint=" + s3 + ",--accounts=iam,--iam-endpoint=" + iam + ",",
			} {
				if !strings.Contains(n, line) {
					t.Errorf("NOTES.txt lacks %q:\n%s", line, n)
				}
			}
		})
	}

	// The wiring of test/cluster's hand-made store, which the chart replaced: the IAM service's
	// private API on a socket the gateway authenticates through; the gateway's buckets and
	// versions; --quiet unless logRequests.
	r := renderVersitygw(t, "versitygw")
	for name, want := range map[string][]string{
		"iam": {"-p", ":7071", "--health", "/healthz", "--quiet", "iam", "--dir", "/iam", "--private-ports",
			"/socket/iam.sock"},
		"s3": {"-p", ":7070", "--health", "/healthz", "--quiet", "--iam-standalone-endpoint", "/socket/iam.sock",
			"posix", "--versioning-dir", "/versions", "/data"},
	} {
		c := r.container(t, name)
		if !slices.Equal(c.Args, want) {
			t.Errorf("container %s: args %v, want %v", name, c.Args, want)
		}
		if c.Image != "ghcr.io/kube-cosi/versitygw:"+chartAppVersion(t, versitygwChart) {
			t.Errorf("container %s: image %s, want the project's versitygw at the chart's appVersion", name, c.Image)
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != intstr.FromString(name) {
				t.Errorf("container %s: probe %+v, want GET /healthz on port %s", name, p, name)
			}
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: resources %v, want memory requests and limits", name, c.Resources)
		}
	}
	logged := renderVersitygw(t, "versitygw", "logRequests=true", "s3.extraArgs={--region,eu-west-1}")
	if got := logged.container(t, "s3").Args; slices.Contains(got, "--quiet") ||
		!slices.Equal(got[4:8], []string{"--iam-standalone-endpoint", "/socket/iam.sock", "--region", "eu-west-1"}) {
		t.Errorf("s3 args with logRequests and extraArgs: %v, want no --quiet and the flags before posix", got)
	}
	spec := r.deployment.Spec.Template.Spec
	// Both default to true.
	if ptr.Deref(spec.EnableServiceLinks, true) || ptr.Deref(spec.AutomountServiceAccountToken, true) {
		t.Errorf("enableServiceLinks %v, automountServiceAccountToken %v: want both false (versitygw reads VGW_* "+
			"variables; it needs no token)", spec.EnableServiceLinks, spec.AutomountServiceAccountToken)
	}
}

// TestVersitygwREADME runs the install commands of the chart's README, the store's then the S3
// driver's, in an API server of its own (the driver's release would meet config/driver/s3's
// objects in the shared one): the store's release, its PVC and the driver's Secret and flags are
// what they say. helm uninstall then leaves the PVC, and installing again adopts it.
func TestVersitygwREADME(t *testing.T) {
	ctx := context.Background()
	e, kc := ownAPIServer(t)
	// The README installs the driver after the cosi chart, whose namespace exists then.
	cosiNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if err := e.Client.Create(ctx, cosiNS); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, versitygwChart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(data))
	if len(blocks) != 2 {
		t.Fatalf("%s/README.md has %d sh blocks, want 2: the store's install and the driver's", versitygwChart,
			len(blocks))
	}
	for _, b := range blocks {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b)
		cmd.Dir = env.RepoRoot
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc,
			"PATH="+filepath.Join(env.RepoRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's block failed: %v\n--- block\n%s--- output\n%s", err, b, out)
		}
	}

	var root corev1.Secret
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: storeNamespace, Name: rootSecret}, &root); err != nil {
		t.Fatal(err)
	}
	key, secret := string(root.Data["ROOT_ACCESS_KEY_ID"]), string(root.Data["ROOT_SECRET_ACCESS_KEY"])
	if key == "" || len(secret) < 20 {
		t.Errorf("root Secret: key %q, a secret of %d characters", key, len(secret))
	}
	var creds corev1.Secret
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cosi-driver-s3-credentials"},
		&creds); err != nil {
		t.Fatal(err)
	}
	if got, want := string(creds.Data["credentials"]),
		"AWS_ACCESS_KEY_ID="+key+"\nAWS_SECRET_ACCESS_KEY="+secret+"\n"; got != want {
		t.Errorf("the driver's credentials file differs from the root key's lines")
	}
	var driver appsv1.Deployment
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "s3-cosi-driver"}, &driver); err != nil {
		t.Fatal(err)
	}
	n := notes(t, "versitygw")
	for _, arg := range driver.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(arg, "--s3-endpoint=") || strings.HasPrefix(arg, "--iam-endpoint=") ||
			strings.HasPrefix(arg, "--accounts=") {
			if !strings.Contains(n, "\n  "+arg+"\n") {
				t.Errorf("the README gives the driver %s, which NOTES.txt does not print", arg)
			}
		}
	}

	pvc := &corev1.PersistentVolumeClaim{}
	pvcKey := client.ObjectKey{Namespace: storeNamespace, Name: "versitygw-data"}
	if err := e.Client.Get(ctx, pvcKey, pvc); err != nil {
		t.Fatalf("the store's PVC after the README's helm install: %v", err)
	}
	uid := pvc.UID
	helmDo := func(args ...string) {
		t.Helper()
		if _, err := helm(append(args, "--kubeconfig", kc, "--namespace", storeNamespace)...); err != nil {
			t.Fatal(err)
		}
	}
	helmDo("uninstall", "versitygw")
	if err := e.Client.Get(ctx, pvcKey, pvc); err != nil || pvc.DeletionTimestamp != nil {
		t.Fatalf("the store's PVC after helm uninstall: %v (deleted: %v), want it kept", err, pvc.DeletionTimestamp)
	}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: storeNamespace, Name: "versitygw"},
		&appsv1.Deployment{}); err == nil {
		t.Error("the store's Deployment is still there after helm uninstall")
	}
	helmDo("install", "versitygw", filepath.Join(env.RepoRoot, versitygwChart),
		"--set", "rootCredentials.existingSecret="+rootSecret)
	if err := e.Client.Get(ctx, pvcKey, pvc); err != nil || pvc.UID != uid {
		t.Errorf("the store's PVC after installing again: %v, UID %s, want the first one (%s) adopted", err, pvc.UID, uid)
	}
}

// shellBlocks returns the text of every ```sh block of a Markdown document, in order.
func shellBlocks(doc string) []string {
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```$").FindAllStringSubmatch(doc, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// chartAppVersion returns the appVersion of a chart's Chart.yaml.
func chartAppVersion(t *testing.T, chart string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no appVersion", chart)
	return ""
}

// TestVersitygwREADMENamesThePin: the chart's README names the gateway's version that
// hack/versitygw pins, which its image is built from.
func TestVersitygwREADMENamesThePin(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(env.RepoRoot, "hack", "versitygw", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require github\.com/versity/versitygw (v\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("hack/versitygw/go.mod requires no github.com/versity/versitygw")
	}
	readme, err := os.ReadFile(filepath.Join(env.RepoRoot, versitygwChart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, append([]byte("pins, "), m[1]...)) {
		t.Errorf("%s/README.md does not name the pinned version %s", versitygwChart, m[1])
	}
}

// equalYAML compares two values as their YAML, as the renderings are compared.
func equalYAML(t *testing.T, a, b any) bool {
	t.Helper()
	return diff(t, a, b) == ""
}
