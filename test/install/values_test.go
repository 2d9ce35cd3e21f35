package install

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/drivers/azure"
	s3 "github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// TestChartValues renders the charts with the values that change their shape (what the cluster
// tests and clusters without kube-proxy set) and sends them to the API server with a dry run.
func TestChartValues(t *testing.T) {
	const ns = "cosi-values"
	if err := env.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	hostEnv := corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "10.0.0.1"}
	for _, c := range []struct {
		name, chart string
		set         []string
		values      string   // a values file of the repository, or ""
		kinds       []string // every kind rendered, sorted
		check       func(t *testing.T, d *appsv1.Deployment)
	}{{
		name: "cosi with host network, no endpoints, no CRDs, no policies", chart: "charts/cosi",
		set: []string{"hostNetwork=true", "ports.metrics=0", "ports.health=0", "crds.install=false",
			"admissionPolicies.enabled=false", "replicas=1", "leaderElection.enabled=false", "image.tag=v9.9.9",
			"extraEnv[0].name=" + hostEnv.Name, "extraEnv[0].value=" + hostEnv.Value, "extraArgs={--v=2}"},
		kinds: []string{
			"ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "ServiceAccount",
		},
		check: func(t *testing.T, d *appsv1.Deployment) {
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork %v, dnsPolicy %q", spec.HostNetwork, spec.DNSPolicy)
			}
			if c.Image != "ghcr.io/kube-cosi/cosi-controller:v9.9.9" {
				t.Errorf("image %s", c.Image)
			}
			wantArgs := []string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0", "--v=2"}
			if !slices.Equal(c.Args, wantArgs) {
				t.Errorf("args %v, want %v", c.Args, wantArgs)
			}
			if c.LivenessProbe != nil || c.ReadinessProbe != nil || len(c.Ports) > 0 {
				t.Errorf("probes or ports without endpoints: %v %v %v", c.LivenessProbe, c.ReadinessProbe, c.Ports)
			}
			if !slices.Contains(c.Env, hostEnv) {
				t.Errorf("env %v lacks %v", c.Env, hostEnv)
			}
		},
	}, {
		name:  "another driver, no Secret, host network, no endpoints, a writable root for the driver",
		chart: "charts/cosi-driver",
		set: []string{"driver.image=registry.example.com/vendor/driver:1.0", "driver.args={--verbose}", "driver.nameFlag=",
			"driver.credentialsSecret.name=", "driver.metricsPort=0", "sidecar.image=registry.example.com/cosi-sidecar:2.0",
			"sidecar.ports.metrics=0", "sidecar.ports.health=0", "hostNetwork=true",
			"driver.securityContext.readOnlyRootFilesystem=false",
			"extraEnv[0].name=" + hostEnv.Name, "extraEnv[0].value=" + hostEnv.Value,
			"sidecar.v1alpha1.s3Endpoint=https://s3.example.com:9000", "sidecar.v1alpha1.s3Region=us-east-1"},
		kinds: []string{
			"ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "ServiceAccount",
		},
		check: func(t *testing.T, d *appsv1.Deployment) {
			spec := d.Spec.Template.Spec
			drv, sidecar := spec.Containers[0], spec.Containers[1]
			if drv.Image != "registry.example.com/vendor/driver:1.0" ||
				sidecar.Image != "registry.example.com/cosi-sidecar:2.0" {
				t.Errorf("images %s, %s", drv.Image, sidecar.Image)
			}
			if drv.SecurityContext == nil || *drv.SecurityContext.ReadOnlyRootFilesystem ||
				sidecar.SecurityContext == nil || !*sidecar.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("driver.securityContext changed more or less than the driver's: driver %v, sidecar %v",
					drv.SecurityContext, sidecar.SecurityContext)
			}
			if !slices.Equal(drv.Args, []string{"--verbose"}) {
				t.Errorf("driver args %v, want [--verbose] (no --credentials-file without a Secret)", drv.Args)
			}
			for _, want := range []string{
				"--v1alpha1-s3-endpoint=https://s3.example.com:9000", "--v1alpha1-s3-region=us-east-1",
			} {
				if !slices.Contains(sidecar.Args, want) {
					t.Errorf("sidecar args %v lack %s", sidecar.Args, want)
				}
			}
			var volumes []string
			for _, v := range spec.Volumes {
				volumes = append(volumes, v.Name)
			}
			if want := []string{"socket", "kube-api-access"}; !slices.Equal(volumes, want) {
				t.Errorf("volumes %v, want %v (no credentials without a Secret)", volumes, want)
			}
			for _, c := range spec.Containers {
				if !slices.Contains(c.Env, hostEnv) || c.Env[0].Name != "COSI_ENDPOINT" {
					t.Errorf("%s: env %v, want COSI_ENDPOINT and %v", c.Name, c.Env, hostEnv)
				}
				if c.LivenessProbe != nil || len(c.Ports) > 0 {
					t.Errorf("%s: probes or ports without endpoints", c.Name)
				}
			}
		},
	}, {
		name: "the Azure Blob driver (the chart's examples/azure-values.yaml)", chart: "charts/cosi-driver",
		values: "charts/cosi-driver/examples/azure-values.yaml", set: []string{"image.tag=v9.9.9"},
		kinds: []string{
			"ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Role",
			"RoleBinding", "Service", "ServiceAccount",
		},
		check: func(t *testing.T, d *appsv1.Deployment) {
			drv := d.Spec.Template.Spec.Containers[0]
			if drv.Image != "ghcr.io/kube-cosi/cosi-driver-azure:v9.9.9" {
				t.Errorf("driver image %s, want the project's cosi-driver-azure", drv.Image)
			}
			for _, want := range []string{
				"--name=" + azure.DefaultName, "--credentials-file=/etc/cosi/credentials/credentials",
			} {
				if !slices.Contains(drv.Args, want) {
					t.Errorf("driver args %v lack %s", drv.Args, want)
				}
			}
		},
	}, {
		name:   "a v1alpha1 driver that reads Buckets (examples/v1alpha1-bucket-reader-values.yaml)",
		chart:  "charts/cosi-driver",
		values: "charts/cosi-driver/examples/v1alpha1-bucket-reader-values.yaml", set: []string{"image.tag=v9.9.9"},
		kinds: []string{
			"ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Role",
			"RoleBinding", "Service", "ServiceAccount",
		},
		check: func(t *testing.T, d *appsv1.Deployment) {
			// The driver reads the API with its own ServiceAccount's token, the sidecar with the Pod's.
			const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
			spec := d.Spec.Template.Spec
			mounts := map[string]string{}
			for _, c := range spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.MountPath == tokenDir {
						mounts[c.Name] = m.Name
					}
				}
			}
			if mounts["driver"] != "driver-token" || mounts["sidecar"] != "kube-api-access" {
				t.Errorf("token mounts %v, want the driver's own token in the driver, the Pod's in the sidecar", mounts)
			}
			for _, v := range spec.Volumes {
				if v.Name == "driver-token" && (v.Secret == nil || v.Secret.SecretName != "v1alpha1-driver-token") {
					t.Errorf("volume driver-token %+v, want the Secret v1alpha1-driver-token", v.VolumeSource)
				}
			}
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--set", strings.Join(c.set, ",")}
			if c.values != "" {
				args = append(args, "-f", filepath.Join(env.RepoRoot, c.values))
			}
			rendering := helmTemplateIn(t, ns, c.chart, "v", args...)
			var kinds []string
			var d *appsv1.Deployment
			for _, o := range decode(t, rendering) {
				kinds = append(kinds, o.GetKind())
				if o.GetKind() == "Deployment" {
					d = &appsv1.Deployment{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
						t.Fatal(err)
					}
				}
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, c.kinds) {
				t.Fatalf("rendered %v, want %v", kinds, c.kinds)
			}
			c.check(t, d)
			apply(t, c.chart, rendering, "--dry-run=server")
		})
	}
}

// TestChartSchemas checks that values.schema.json refuses what it should: a misspelt value, a
// value of the wrong type and more than one replica without leader election fail `helm template`
// instead of being ignored.
func TestChartSchemas(t *testing.T) {
	for _, c := range []struct{ chart, set, want string }{
		{"charts/cosi", "replica=3", "replica"},
		{"charts/cosi", "ports.metrics=eighty", "ports"},
		{"charts/cosi-driver", "driver.credentialsSecret.nmae=x", "nmae"},
		{"charts/cosi", "v1alpha1BucketView.enable=true", "enable"},
		{"charts/cosi", "v1alpha1BucketView.serviceAccounts[0].namespace=storage", "/v1alpha1BucketView/serviceAccounts/0"},
		{"charts/cosi-driver", "sidecar.ports.health=70000", "health"},
		{"charts/cosi-driver", "driver.name=-not.a.name", "/driver/name"},
		{"charts/cosi-driver", "sidecar.v1alpha1.s3Endpoint=s3.example.com", "/sidecar/v1alpha1/s3Endpoint"},
		{"charts/cosi-driver", "sidecar.v1alpha1.s3Region=us east", "/sidecar/v1alpha1/s3Region"},
		// Without leader election every replica is active: two controllers, two sidecars.
		{"charts/cosi", "leaderElection.enabled=false", "/replicas"},
		{"charts/cosi-driver", "leaderElection.enabled=false,replicas=3", "/replicas"},
		{"charts/versitygw", "persistence.enable=false", "enable"},
		{"charts/versitygw", "persistence.size=ten", "/persistence/size"},
		{"charts/versitygw", "s3.extraArgs=--region", "/s3/extraArgs"},
	} {
		_, err := helm("template", "x", filepath.Join(env.RepoRoot, c.chart), "--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s --set %s: got %v, want a schema error naming %s", c.chart, c.set, err, c.want)
		}
	}
}

// TestOnlyTheSidecarHasTheToken checks both renderings of the driver: the Pod's ServiceAccount
// token is mounted into the sidecar only, so that a driver never holds the sidecar's rights.
func TestOnlyTheSidecarHasTheToken(t *testing.T) {
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	for what, rendering := range map[string][]byte{
		"config/driver/s3":   kustomize(t, "config/driver/s3"),
		"charts/cosi-driver": helmTemplate(t, "charts/cosi-driver", "s3"),
	} {
		ds := deploymentsOf(t, rendering)
		if len(ds) != 1 {
			t.Fatalf("%s: %d Deployments", what, len(ds))
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds[0].Object, d); err != nil {
			t.Fatal(err)
		}
		spec := d.Spec.Template.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken is not false", what)
		}
		for _, c := range spec.Containers {
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tokenDir })
			if mounted != (c.Name == "sidecar") {
				t.Errorf("%s: container %s has the token: %v", what, c.Name, mounted)
			}
		}
	}
}

// TestDriverNamePerRelease renders two releases of cosi-driver, one store each: their drivers get
// different names, and so their sidecars different Leases (sidecar.LeaseName) and different
// classes. A release other than the documented "s3" without driver.name is refused: it would
// share the S3 driver's default name, Lease and buckets with release s3.
func TestDriverNamePerRelease(t *testing.T) {
	nameOf := func(rendering []byte) string {
		t.Helper()
		ds := deploymentsOf(t, rendering)
		if len(ds) != 1 {
			t.Fatalf("%d Deployments", len(ds))
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds[0].Object, d); err != nil {
			t.Fatal(err)
		}
		name := s3.DefaultName // the driver's default, without --name
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--name="); ok {
				name = v
			}
		}
		return name
	}
	first := nameOf(helmTemplate(t, "charts/cosi-driver", "s3"))
	second := nameOf(helmTemplate(t, "charts/cosi-driver", "archive", "--set", "driver.name=archive.s3.example.com"))
	if first != s3.DefaultName || second != "archive.s3.example.com" {
		t.Errorf("driver names %q and %q, want %q and archive.s3.example.com", first, second, s3.DefaultName)
	}
	if sidecar.LeaseName(first) == sidecar.LeaseName(second) {
		t.Errorf("both releases elect their leader with Lease %s", sidecar.LeaseName(first))
	}

	_, err := helm("template", "archive", filepath.Join(env.RepoRoot, "charts", "cosi-driver"))
	if err == nil || !strings.Contains(err.Error(), "driver.name is required") {
		t.Errorf("a second release without driver.name: got %v, want it refused", err)
	}
}

// TestGracePeriodsCoverTheShutdown checks both renderings of the driver: on SIGTERM the sidecar
// waits up to sidecar.ShutdownTimeout for reconciles in flight (each bounded by the reconcile
// deadline that also bounds --driver-timeout), so the Pod's terminationGracePeriodSeconds must be
// longer, or the kubelet kills the sidecar while it records what a driver did. The local
// environment (and so cosi-bench) gives its sidecar the same (localenv.SidecarGracePeriod).
func TestGracePeriodsCoverTheShutdown(t *testing.T) {
	for what, rendering := range map[string][]byte{
		"config/driver/s3":   kustomize(t, "config/driver/s3"),
		"charts/cosi-driver": helmTemplate(t, "charts/cosi-driver", "s3"),
	} {
		ds := deploymentsOf(t, rendering)
		if len(ds) != 1 {
			t.Fatalf("%s: %d Deployments", what, len(ds))
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds[0].Object, d); err != nil {
			t.Fatal(err)
		}
		grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
		if grace == nil || time.Duration(*grace)*time.Second <= sidecar.ShutdownTimeout {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want more than the sidecar's shutdown timeout %v",
				what, grace, sidecar.ShutdownTimeout)
		}
		if grace != nil && time.Duration(*grace)*time.Second != localenv.SidecarGracePeriod {
			t.Errorf("%s: terminationGracePeriodSeconds %v, the local environment gives the sidecar %v",
				what, *grace, localenv.SidecarGracePeriod)
		}
	}
}

// TestMetricsAreAuthenticated checks every rendering: the Deployments serve /metrics with
// --metrics-secure on the port the Service names, and bind the component's ServiceAccount to
// system:auth-delegator to check tokens (internal/cmdutil/serving); with metrics.secure=false the charts do
// neither. The binaries' own defaults are loopback (cmd/*'s tests).
func TestMetricsAreAuthenticated(t *testing.T) {
	for _, c := range []struct {
		what, container, sa, binding string
		rendering                    []byte
		secure                       bool
	}{
		{"config/default", "controller", "cosi-controller", "cosi-controller-auth-delegator",
			kustomize(t, "config/default"), true},
		{"charts/cosi", "controller", "cosi-controller", "cosi-controller-auth-delegator",
			helmTemplate(t, "charts/cosi", "cosi"), true},
		{"config/driver/s3", "sidecar", "s3-cosi-driver", "s3-cosi-sidecar-auth-delegator",
			kustomize(t, "config/driver/s3"), true},
		{"charts/cosi-driver", "sidecar", "s3-cosi-driver", "s3-cosi-sidecar-auth-delegator",
			helmTemplate(t, "charts/cosi-driver", "s3"), true},
		{"charts/cosi metrics.secure=false", "controller", "cosi-controller", "cosi-controller-auth-delegator",
			helmTemplate(t, "charts/cosi", "cosi", "--set", "metrics.secure=false"), false},
		{"charts/cosi-driver metrics.secure=false", "sidecar", "s3-cosi-driver", "s3-cosi-sidecar-auth-delegator",
			helmTemplate(t, "charts/cosi-driver", "s3", "--set", "metrics.secure=false"), false},
	} {
		objects := index(t, c.rendering)
		var args []string
		for _, d := range deploymentsOf(t, c.rendering) {
			dep := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, dep); err != nil {
				t.Fatal(err)
			}
			for _, ct := range dep.Spec.Template.Spec.Containers {
				if ct.Name == c.container {
					args = ct.Args
				}
			}
		}
		if got := slices.Contains(args, "--metrics-secure=true"); got != c.secure {
			t.Errorf("%s: %s args %v: --metrics-secure=true %v, want %v", c.what, c.container, args, got, c.secure)
		}
		b, ok := objects["ClusterRoleBinding/"+c.binding]
		if ok != c.secure {
			t.Errorf("%s: ClusterRoleBinding %s rendered %v, want %v", c.what, c.binding, ok, c.secure)
		}
		if !ok {
			continue
		}
		binding := &rbacv1.ClusterRoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, binding); err != nil {
			t.Fatal(err)
		}
		if binding.RoleRef.Name != "system:auth-delegator" || len(binding.Subjects) != 1 ||
			binding.Subjects[0].Name != c.sa || binding.Subjects[0].Namespace != namespace {
			t.Errorf("%s: %s binds %v to %s, want ServiceAccount %s/%s to system:auth-delegator", c.what, c.binding,
				binding.Subjects, binding.RoleRef.Name, namespace, c.sa)
		}
	}
}

// TestDriverMetricsStayInThePod checks every rendering of the driver's Deployment: the driver's
// /metrics (plain HTTP, no authentication) is bound to the Pod's loopback only, nothing names it
// as a port of the Pod or a Service (with hostNetwork the Pod's addresses are the node's), and the
// sidecar relays it on its own /metrics server (--driver-metrics-url), which is HTTPS to tokens
// cosi-metrics-reader allows: the rule the controller's and sidecar's metrics follow.
func TestDriverMetricsStayInThePod(t *testing.T) {
	for what, rendering := range map[string][]byte{
		"config/driver/s3": kustomize(t, "config/driver/s3"),
		"charts/cosi-driver": helmTemplate(t, "charts/cosi-driver", "s3",
			"--set", "metrics.serviceMonitor.enabled=true"),
		"charts/cosi-driver hostNetwork": helmTemplate(t, "charts/cosi-driver", "s3", "--set", "hostNetwork=true"),
		"charts/cosi-driver azure": helmTemplate(t, "charts/cosi-driver", "azure",
			"-f", filepath.Join(env.RepoRoot, "charts/cosi-driver/examples/azure-values.yaml")),
	} {
		var relayed bool
		for _, d := range deploymentsOf(t, rendering) {
			dep := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, dep); err != nil {
				t.Fatal(err)
			}
			for _, ct := range dep.Spec.Template.Spec.Containers {
				for _, a := range ct.Args {
					if v, ok := strings.CutPrefix(a, "--metrics-address="); ok && !loopbackAddress(v) {
						t.Errorf("%s: container %s serves its plain /metrics on %s, beyond the Pod's loopback", what,
							ct.Name, v)
					}
					if v, ok := strings.CutPrefix(a, "--driver-metrics-url="); ok && ct.Name == "sidecar" {
						relayed = strings.HasPrefix(v, "http://127.0.0.1:")
					}
				}
				for _, p := range ct.Ports {
					if p.Name != "metrics" && p.Name != "health" {
						t.Errorf("%s: container %s has port %s (%d), neither the sidecar's authenticated metrics nor "+
							"its probes", what, ct.Name, p.Name, p.ContainerPort)
					}
				}
			}
		}
		if !relayed {
			t.Errorf("%s: the sidecar does not relay the driver's loopback /metrics (--driver-metrics-url)", what)
		}
		for key, o := range index(t, rendering) {
			if !strings.HasPrefix(key, "Service/") {
				continue
			}
			svc := &corev1.Service{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, svc); err != nil {
				t.Fatal(err)
			}
			for _, p := range svc.Spec.Ports {
				if p.TargetPort.String() != "metrics" {
					t.Errorf("%s: %s port %s targets %s, not the sidecar's authenticated metrics", what, key, p.Name,
						p.TargetPort.String())
				}
			}
		}
		if sm, ok := index(t, rendering)["ServiceMonitor/s3-cosi-driver"]; ok {
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			var paths []string
			for _, e := range endpoints {
				e, _ := e.(map[string]any)
				if e["port"] != "metrics" || e["scheme"] != "https" {
					t.Errorf("%s: ServiceMonitor endpoint %v: want the port metrics, over https", what, e)
				}
				paths = append(paths, fmt.Sprint(e["path"]))
			}
			if !slices.Contains(paths, serving.DriverMetricsPath) {
				t.Errorf("%s: the ServiceMonitor scrapes %v, not the driver's metrics at %s", what, paths,
					serving.DriverMetricsPath)
			}
		}
	}
}

// loopbackAddress tells whether host:port is on loopback ("localhost" included); ":8082" is not.
func loopbackAddress(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
