// Package integration runs the COSI Controller, the provisioner sidecar and the in-memory driver
// together, in one process, against a real kube-apiserver: the KEP's control flows end to end,
// asserting what users see (Secrets whose credentials open the bucket) and what the backend ends
// with (empty after Delete, untouched after Retain). test/e2e runs the same as separate processes.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const namespace = "team-a"

var (
	env *testenv.Env
	// system is the one driver, sidecar and controller all tests share.
	system *cosiSystem
)

type cosiSystem struct {
	driverName string
	driver     *memory.Driver
}

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		return start(ctx, memory.Config{Name: "memory.integration.cosi.io", ExistingBuckets: []string{"legacy-data"}})
	})
}

// start runs the driver, the sidecar and the controller, each with its own least-privilege
// identity, until the tests are done.
func start(ctx context.Context, cfg memory.Config) error {
	if err := env.CreateNamespace(ctx, namespace); err != nil {
		return err
	}
	d, err := memory.New(cfg)
	if err != nil {
		return err
	}
	system = &cosiSystem{driverName: cfg.Name, driver: d}
	dir, err := os.MkdirTemp("", "cosi-integration")
	if err != nil {
		return err
	}
	env.Cleanup(func() error { return os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "driver.sock")
	srv, err := driver.NewServer(
		ctx,
		driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Registerer: prometheus.NewRegistry()},
	)
	if err != nil {
		return err
	}
	sidecarCfg, err := env.ServiceAccountConfig(ctx, "config/rbac/sidecar/role.yaml", "cosi-system", "cosi-sidecar")
	if err != nil {
		return err
	}
	controllerCfg, err := env.ServiceAccountConfig(
		ctx,
		"config/rbac/controller/role.yaml",
		"cosi-system",
		"cosi-controller",
	)
	if err != nil {
		return err
	}
	env.Go(ctx, "driver", srv.Serve)
	env.Go(ctx, "sidecar", func(ctx context.Context) error {
		return sidecar.Run(ctx, sidecarCfg, sidecar.Options{DriverEndpoint: endpoint, DriverTimeout: 10 * time.Second,
			DriverStartTimeout: 30 * time.Second, Workers: 8, MetricsAddress: "0", HealthAddress: "0"}, logr.Discard())
	})
	env.Go(ctx, "controller", func(ctx context.Context) error {
		return controller.Run(
			ctx,
			controllerCfg,
			controller.Options{Workers: 8, MetricsAddress: "0", HealthAddress: "0"},
			logr.Discard(),
		)
	})
	return nil
}

var counter atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func del(t testing.TB, obj client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

func provisioned(t testing.TB, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		var conds []metav1.Condition
		switch o := obj.(type) {
		case *cosiapi.BucketClaim:
			conds = o.Status.Conditions
		case *cosiapi.BucketAccess:
			conds = o.Status.Conditions
		case *cosiapi.Bucket:
			conds = o.Status.Conditions
		}
		if !meta.IsStatusConditionTrue(conds, cosiapi.ConditionProvisioned) {
			return fmt.Errorf("%s not provisioned: %+v", obj.GetName(), conds)
		}
		return nil
	})
}

func bucketClass(policy cosiapi.DeletionPolicy) *cosiapi.BucketClass {
	return objects.BucketClass(
		uniqueName("class"),
		system.driverName,
		policy,
		objects.ClassParameters(map[string]string{memory.ParamVersioning: "true"}),
	)
}

func accessClass(multi bool) *cosiapi.BucketAccessClass {
	c := objects.BucketAccessClass(uniqueName("accessclass"), system.driverName)
	if multi {
		objects.MultiBucket(c)
	}
	return c
}

func claim(class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(namespace, uniqueName("claim"), class, objects.S3)
}

func access(class string, modes cosiapi.BucketAccessMode, claims ...*cosiapi.BucketClaim) *cosiapi.BucketAccess {
	ba := objects.BucketAccess(namespace, uniqueName("access"), class)
	for _, c := range claims {
		objects.Grant(c.Name, c.Name+"-creds", cosiapi.BucketAccessModes{ObjectData: modes})(ba)
	}
	return ba
}

// secretCredentials reads an access Secret as a workload would and returns its bucket and
// credentials.
func secretCredentials(t testing.TB, ba *cosiapi.BucketAccess, i int) (string, *cosiproto.CredentialInfo) {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(
		context.Background(),
		types.NamespacedName{Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[i].AccessSecretName},
		s,
	); err != nil {
		t.Fatal(err)
	}
	return string(s.Data[cosiapi.SecretKeyS3BucketName]), &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{
		AccessKeyId: string(
			s.Data[cosiapi.SecretKeyS3AccessKeyID],
		),
		AccessSecretKey: string(s.Data[cosiapi.SecretKeyS3SecretAccessKey]),
	}}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
