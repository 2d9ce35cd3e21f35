// Package kubectlcosi tests the kubectl-cosi plugin (internal/kubectlcosi) as users run it: against
// a real kube-apiserver where the real COSI controller and sidecar run with the memory driver,
// with leader election on (doctor reads their Leases) and the admission policies of
// config/admission installed, as an admin and as a user who may only read their namespace.
package kubectlcosi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const (
	namespace  = "team-a"
	driverName = "memory.kubectl.cosi.io"
	// cosiNamespace holds the Leases and the components' roles.
	cosiNamespace = "cosi-system"
	// viewerName may only read BucketClaims, BucketAccesses, Secrets and Events in namespace.
	viewerName = "viewer"
)

var (
	env *testenv.Env
	// viewer is the configuration of the namespace-only user.
	viewer *rest.Config
	// sidecarCfg is the sidecar's identity, for the sidecars the tests start.
	sidecarCfg *rest.Config
)

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		if err := env.CreateNamespace(ctx, namespace); err != nil {
			return err
		}
		if err := installAdmission(ctx); err != nil {
			return err
		}
		var err error
		if viewer, err = viewerConfig(ctx); err != nil {
			return err
		}
		return start(ctx)
	})
}

// installAdmission installs the admission policies and their bindings from config/admission.
func installAdmission(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(env.RepoRoot, "config", "admission", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		if _, err := localenv.ApplyFile(ctx, env.Client, f); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// viewerConfig is a user bound to a Role that reads COSI's namespaced objects, Secrets and
// Events in namespace, and nothing else.
func viewerConfig(ctx context.Context) (*rest.Config, error) {
	read := []string{"get", "list", "watch"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"bucketclaims", "bucketaccesses"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"secrets", "events"}, Verbs: read},
	}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: viewerName, Namespace: namespace}, Rules: rules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: viewerName, Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: viewerName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: viewerName}},
		},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: viewerName}
	return cfg, nil
}

// start runs the memory driver, its sidecar and the controller, on their generated roles and with
// leader election, until the tests are done. Secrets are checked every secretCheckInterval, so
// that a deleted Secret stays Terminating for the whole test.
func start(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kubectl-cosi")
	if err != nil {
		return err
	}
	env.Cleanup(func() error { return os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "driver.sock")
	d, err := memory.New(memory.Config{Name: driverName})
	if err != nil {
		return err
	}
	srv, err := driver.NewServer(ctx,
		driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Registerer: prometheus.NewRegistry(),
			Interceptors: []grpc.UnaryServerInterceptor{backendDown}})
	if err != nil {
		return err
	}
	if sidecarCfg, err = env.ServiceAccountConfig(ctx, "config/rbac/sidecar/role.yaml", cosiNamespace,
		"cosi-sidecar"); err != nil {
		return err
	}
	controllerCfg, err := env.ServiceAccountConfig(ctx, "config/rbac/controller/role.yaml", cosiNamespace,
		"cosi-controller")
	if err != nil {
		return err
	}
	env.Go(ctx, "driver", srv.Serve)
	opts := sidecarOptions(endpoint)
	opts.SecretCheckInterval = secretCheckInterval
	env.Go(ctx, "sidecar", func(ctx context.Context) error {
		return sidecar.Run(ctx, sidecarCfg, opts, logr.Discard())
	})
	env.Go(ctx, "controller", func(ctx context.Context) error {
		return controller.Run(ctx, controllerCfg, controller.Options{Workers: 4, MetricsAddress: "0",
			HealthAddress: "0", LeaderElection: true, LeaderElectionNamespace: cosiNamespace,
			DriverGrace: 2 * time.Second}, logr.Discard())
	})
	return nil
}

// unavailable, as the bucket parameter region, makes the driver fail DriverCreateBucket with
// Unavailable: a backend that is down, which the sidecar retries.
const unavailable = "backend-down"

func backendDown(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	r, ok := req.(*cosiproto.DriverCreateBucketRequest)
	if ok && r.GetParameters()[memory.ParamRegion] == unavailable {
		return nil, grpcstatus.Error(codes.Unavailable, "the object store does not answer")
	}
	return next(ctx, req)
}

// sidecarOptions are the test sidecar's options with leader election in cosiNamespace.
func sidecarOptions(endpoint string) sidecar.Options {
	opts := testenv.SidecarOptions(endpoint)
	opts.LeaderElection, opts.LeaderElectionNamespace = true, cosiNamespace
	return opts
}

// secretCheckInterval is the sidecar's --secret-check-interval: not the default, which kubectl
// cosi assumes when a Secret does not say.
const secretCheckInterval = 20 * time.Minute

var counter atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), o))
		})
	}
}

func provisioned(t *testing.T, obj client.Object, conds func() []metav1.Condition) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(conds(), cosiapi.ConditionProvisioned) {
			return fmt.Errorf("%s not provisioned: %+v", obj.GetName(), conds())
		}
		return nil
	})
}

// healthy creates a class, an access class, a claim and an access, and waits until both are
// provisioned.
func healthy(t *testing.T) (*cosiapi.BucketClaim, *cosiapi.BucketAccess) {
	t.Helper()
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName)
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	ba := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite))
	create(t, class, aclass, claim, ba)
	provisioned(t, claim, func() []metav1.Condition { return claim.Status.Conditions })
	provisioned(t, ba, func() []metav1.Condition { return ba.Status.Conditions })
	return claim, ba
}

// run runs the plugin as cfg's user with args and returns its exit code, standard output and
// standard error.
func run(t *testing.T, cfg *rest.Config, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := kubectlcosi.Main(t.Context(), kubectlcosi.Config{REST: cfg, Namespace: namespace}, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// status runs status -o json and decodes the report.
func status(t *testing.T, cfg *rest.Config, args ...string) *kubectlcosi.StatusReport {
	t.Helper()
	code, out, _ := run(t, cfg, append([]string{"status"}, append(args, "-o", "json")...)...)
	if code != 0 {
		t.Fatalf("kubectl cosi status %s: exit code %d", strings.Join(args, " "), code)
	}
	r := &kubectlcosi.StatusReport{}
	if err := json.Unmarshal([]byte(out), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// show logs the text output of the plugin, as a user sees it (go test -v shows it).
func show(t *testing.T, cfg *rest.Config, args ...string) {
	t.Helper()
	_, out, errOut := run(t, cfg, args...)
	t.Logf("$ kubectl cosi %s\n%s%s", strings.Join(args, " "), out, errOut)
}
