package kubectlcosi

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
)

// keyless makes a BucketAccessClass's accesses keyless (authenticationType ServiceAccount).
func keyless(c *cosiapi.BucketAccessClass) {
	c.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
}

// TestDoctorTokensUncapped: the test API server has no --service-account-max-token-expiration, so
// a token minted before its ServiceAccount was re-created, or its minter lost the right, opens a
// keyless access's role for as long as was asked. Where keyless accesses are offered, doctor must
// warn, leave no ServiceAccount behind and print no token.
func TestDoctorTokensUncapped(t *testing.T) {
	create(t, objects.BucketAccessClass(unique("keyless"), driverName, keyless))
	code, r := doctor(t, env.Config)
	for _, want := range [][3]string{
		{"keyless/token-lifetime", kubectlcosi.CheckWarning, "does not cap ServiceAccount tokens (it issued one for " +
			"366 days, as asked)"},
		{"keyless/token-lifetime", kubectlcosi.CheckWarning, "--service-account-max-token-expiration"},
		// The test API server's audience is its issuer, the default.
		{"keyless/audience", kubectlcosi.CheckOK, fmt.Sprintf("audience %q (the default audience of driver %s",
			driverName, driverName)},
	} {
		if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
			t.Error(err)
		}
	}
	if code != 0 {
		t.Errorf("exit %d: a warning is no failure", code)
	}
	noProbeLeft(t, env.Client)
	_, out, errOut := run(t, env.Config, "doctor")
	for _, s := range []string{out, errOut} {
		// Every JWT starts with the base64 of `{"`.
		if strings.Contains(s, "eyJ") {
			t.Errorf("doctor printed a token:\n%s", s)
		}
	}
	if !strings.Contains(out, "WARNING  keyless/token-lifetime") {
		t.Errorf("text output:\n%s%s", out, errOut)
	}
}

// TestDoctorTokensWithoutKeyless: without keyless accesses doctor asks for no token.
func TestDoctorTokensWithoutKeyless(t *testing.T) {
	_, r := doctor(t, env.Config)
	if err := expectCheck(r, "keyless", kubectlcosi.CheckOK, "no BucketAccessClass has authenticationType "+
		"ServiceAccount"); err != nil {
		t.Error(err)
	}
	if c := finding(r, "keyless/token-lifetime", ""); c != nil {
		t.Errorf("asked for tokens: %+v", c)
	}
}

// TestDoctorTokensOfAClusterWithACapAndAudiences: an API server started as an admin should
// (--service-account-max-token-expiration=1h) but whose --api-audiences include the audiences
// of keyless drivers: one given by default (a driver's name, from its class), one in a driver
// Pod's --service-account-audience, one named on doctor's command line. Each such audience lets
// the API token of every Pod open that driver's roles: doctor must fail on each and pass the
// others. A user who may not create ServiceAccounts learns that the checks could not run.
func TestDoctorTokensOfAClusterWithACapAndAudiences(t *testing.T) {
	const (
		classDriver = "s3.keyless.test" // an audience of the API server, by default (its name)
		podAudience = "pod.audience.test"
		otherDriver = "s3.other.test" // runs in a Pod with an issuer and its default audience
	)
	a, err := localenv.StartAPIServer(localenv.APIServerOptions{Flags: map[string][]string{
		"service-account-max-token-expiration": {"1h"},
		"api-audiences":                        {"https://kubernetes.default.svc", classDriver, podAudience},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	if err := a.CreateNamespace(ctx, cosiNamespace); err != nil {
		t.Fatal(err)
	}
	driverPod := func(name string, args ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: "driver", Containers: []corev1.Container{
				{Name: "sidecar", Image: "cosi-sidecar", Args: []string{"--leader-elect=true"}},
				{Name: "driver", Image: "cosi-driver-s3", Args: args},
			}}}
	}
	for _, o := range []client.Object{
		objects.BucketAccessClass("keyless", classDriver, keyless),
		objects.BucketAccessClass("keys", "s3.keys.test"),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: "driver"}},
		driverPod("custom", "--name=s3.custom.test", "--service-account-issuer=https://issuer.example",
			"--service-account-audience", podAudience),
		driverPod("default", "-name", otherDriver, "-service-account-issuer", "https://issuer.example"),
		driverPod("no-issuer", "--name=s3.keys.test", "--service-account-audience=noissuer.audience.test"),
	} {
		if err := a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	code, r := doctor(t, a.Config, "--service-account-audience", "https://kubernetes.default.svc,flag.audience.test")
	for _, want := range [][3]string{
		{"keyless/token-lifetime", kubectlcosi.CheckOK, "caps ServiceAccount tokens at 1h " +
			"(--service-account-max-token-expiration)"},
		{"keyless/audience", kubectlcosi.CheckFailed, fmt.Sprintf("audience %q (the default audience of driver %s, of "+
			"BucketAccessClass keyless) is one of the API server's audiences", classDriver, classDriver)},
		{"keyless/audience", kubectlcosi.CheckFailed, fmt.Sprintf("audience %q (driver s3.custom.test in Pod "+
			"%s/custom) is one of the API server's audiences", podAudience, cosiNamespace)},
		{"keyless/audience", kubectlcosi.CheckFailed, `audience "https://kubernetes.default.svc" ` +
			`(--service-account-audience) is one of`},
		{"keyless/audience", kubectlcosi.CheckOK, fmt.Sprintf("audience %q (driver %s in Pod %s/default) is not",
			otherDriver, otherDriver, cosiNamespace)},
		{"keyless/audience", kubectlcosi.CheckOK, `audience "flag.audience.test" (--service-account-audience) is not`},
	} {
		if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
			t.Error(err)
		}
	}
	for _, other := range []string{"s3.keys.test", "noissuer.audience.test"} {
		if c := finding(r, "keyless/audience", other); c != nil {
			t.Errorf("an audience of a driver without keyless accesses: %+v", c)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	noProbeLeft(t, a.Client)

	// A user who may read the classes and the Pods, and create nothing.
	name := "reader"
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"bucketaccessclasses"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}},
	} {
		if err := a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	reader := rest.CopyConfig(a.Config)
	reader.Impersonate = rest.ImpersonationConfig{UserName: name}
	_, r = doctor(t, reader)
	for _, want := range [][3]string{
		{"keyless/token-lifetime", kubectlcosi.CheckUnknown, "(Forbidden)"},
		{"keyless/audience", kubectlcosi.CheckUnknown, fmt.Sprintf("check that %q", classDriver)},
	} {
		if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
			t.Error(err)
		}
	}
}

// TestDoctorTokensCappedTooLong: a cap longer than a day is a warning that says the cap.
func TestDoctorTokensCappedTooLong(t *testing.T) {
	a, err := localenv.StartAPIServer(localenv.APIServerOptions{Flags: map[string][]string{
		"service-account-max-token-expiration": {"48h"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := a.CreateNamespace(t.Context(), cosiNamespace); err != nil {
		t.Fatal(err)
	}
	if err := a.Client.Create(t.Context(), objects.BucketAccessClass("keyless", driverName, keyless)); err != nil {
		t.Fatal(err)
	}
	_, r := doctor(t, a.Config)
	if err := expectCheck(r, "keyless/token-lifetime", kubectlcosi.CheckWarning, "caps ServiceAccount tokens at "+
		"48h, longer than 24h"); err != nil {
		t.Error(err)
	}
	noProbeLeft(t, a.Client)
}

// TestS3DefaultName: doctor's copy of the S3 driver's default name (its default audience).
func TestS3DefaultName(t *testing.T) {
	if kubectlcosi.S3DefaultName != s3.DefaultName {
		t.Errorf("kubectlcosi.S3DefaultName = %q, drivers/s3 says %q", kubectlcosi.S3DefaultName, s3.DefaultName)
	}
}

// noProbeLeft fails when a ServiceAccount doctor created to ask for tokens is still there.
func noProbeLeft(t *testing.T, c client.Client) {
	t.Helper()
	var sas corev1.ServiceAccountList
	if err := c.List(t.Context(), &sas); err != nil {
		t.Fatal(err)
	}
	for _, sa := range sas.Items {
		if strings.HasPrefix(sa.Name, "kubectl-cosi-doctor-") {
			t.Errorf("doctor left ServiceAccount %s/%s", sa.Namespace, sa.Name)
		}
	}
}
