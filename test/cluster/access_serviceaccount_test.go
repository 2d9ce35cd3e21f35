package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/drivers/s3"
)

// The ServiceAccount story's names: its tenant, its BucketAccessClass, its claim and the
// ServiceAccount its access names.
const (
	keylessTenant = "keyless"
	keylessClass  = "s3-serviceaccount"
	keylessClaim  = "reports"
	keylessSA     = "reporter"
)

// TestServiceAccountPod installs COSI and the S3 driver with Helm, the driver with the node's
// ServiceAccount issuer (docs/install.md, "ServiceAccount authentication"), and follows KEP-1979's
// keyless flow on the node: a BucketAccess of a ServiceAccount class names the workload's
// ServiceAccount; a Pod of that ServiceAccount, with the access's Secret in envFrom and a
// projected token for the driver's audience and nothing else, puts and gets an object through
// the AWS SDK's default credential chain (the token exchanged at the store's STS endpoint, whose
// IAM service fetches the issuer's keys); the same Pod under another ServiceAccount is refused;
// no Secret in the cluster holds a key for the access.
//
// Its file sorts before helm_test.go, so that it runs after TestInstallDoc and before TestHelm;
// it uninstalls what it installed, as TestHelm does, before TestHelm installs its releases.
func TestServiceAccountPod(t *testing.T) {
	needNode(t)
	if noIssuer != nil {
		t.Skipf("no ServiceAccount issuer the store's IAM service can fetch here: %v", noIssuer)
	}
	ctx := context.Background()
	s := theStore(t)
	restrictedNamespace(t, cosiNamespace)
	restrictedNamespace(t, keylessTenant)
	driverCredentials(t, s)
	tag := imageTag()
	t.Cleanup(func() { uninstallHelm(t, keylessTenant) })

	step(t, "install with the issuer", func(t *testing.T) {
		s3Values := helmValues(t, tag, map[string]any{"driver": map[string]any{"args": []string{
			"--s3-endpoint=" + s.S3Endpoint, "--accounts=iam", "--iam-endpoint=" + s.IAMEndpoint,
			"--metrics-address=127.0.0.1:8082",
			"--service-account-issuer=" + front.URL, "--service-account-issuer-thumbprints=" + front.Thumbprint,
		}}})
		command(t, "helm", "install", "cosi", filepath.Join(repo, "charts/cosi"), "-n", cosiNamespace,
			"-f", helmValues(t, tag, nil))
		command(t, "helm", "install", "s3", filepath.Join(repo, "charts/cosi-driver"), "-n", cosiNamespace,
			"-f", s3Values)
		classes(t)
		class := objects.BucketAccessClass(keylessClass, driverName, func(c *cosiapi.BucketAccessClass) {
			c.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
		})
		if err := c.Create(ctx, class); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for _, sa := range []string{keylessSA, "other"} {
			o := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: keylessTenant, Name: sa}}
			if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		if err := c.Create(ctx, objects.BucketClaim(keylessTenant, keylessClaim, "s3-retain", objects.S3)); err != nil {
			t.Fatal(err)
		}
		access := objects.BucketAccess(keylessTenant, keylessClaim, keylessClass,
			objects.Grant(keylessClaim, keylessClaim+"-creds",
				cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}),
			func(a *cosiapi.BucketAccess) { a.Spec.ServiceAccountName = keylessSA })
		if err := c.Create(ctx, access); err != nil {
			t.Fatal(err)
		}
		waitProvisioned(t, keylessTenant, keylessClaim)
	})

	var secret corev1.Secret
	step(t, "the Secret names the role and holds no key", func(t *testing.T) {
		key := client.ObjectKey{Namespace: keylessTenant, Name: keylessClaim + "-creds"}
		if err := c.Get(ctx, key, &secret); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey} {
			if _, ok := secret.Data[k]; ok {
				t.Errorf("the Secret of a ServiceAccount access has %s", k)
			}
		}
		for _, k := range []string{cosiapi.SecretKeyS3RoleARN, cosiapi.SecretKeyS3WebIdentityTokenFile,
			cosiapi.SecretKeyS3STSEndpointURL, cosiapi.SecretKeyS3EndpointURL, cosiapi.SecretKeyS3BucketName} {
			if len(secret.Data[k]) == 0 {
				t.Errorf("the Secret of a ServiceAccount access has no %s", k)
			}
		}
		if got := string(secret.Data[cosiapi.SecretKeyS3WebIdentityTokenFile]); got != s3.DefaultTokenFile {
			t.Errorf("%s is %q, want the driver's default %q", cosiapi.SecretKeyS3WebIdentityTokenFile, got,
				s3.DefaultTokenFile)
		}
	})

	step(t, "a Pod of the ServiceAccount puts and gets with the default credential chain", func(t *testing.T) {
		var put, got string
		if err := front.Serve(ctx, func(context.Context) error {
			var ok bool
			var err error
			if put, ok, err = keylessApp(keylessSA, "put", "summary", "written without a key"); err != nil {
				return fmt.Errorf("the put: %w", err)
			} else if !ok {
				return fmt.Errorf("the put failed: %s", put)
			}
			if got, ok, err = keylessApp(keylessSA, "get", "summary"); err != nil {
				return fmt.Errorf("the get: %w", err)
			} else if !ok {
				return fmt.Errorf("the get failed: %s", got)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("Pod of ServiceAccount %s/%s:\n%s\n%s", keylessTenant, keylessSA, put, got)
		const creds = "\ncredentials: WebIdentityCredentials (temporary: true)"
		if want := "put summary=written without a key" + creds; put != want {
			t.Errorf("put: %q, want %q", put, want)
		}
		if want := "got summary=written without a key" + creds; got != want {
			t.Errorf("get: %q, want %q", got, want)
		}
	})

	step(t, "a Pod of another ServiceAccount with the same Secret is refused", func(t *testing.T) {
		var out string
		var ok bool
		if err := front.Serve(ctx, func(context.Context) error {
			var err error
			out, ok, err = keylessApp("other", "get", "summary")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("Pod of ServiceAccount %s/other: %s", keylessTenant, out)
		// The trust policy's condition on sub fails: InvalidIdentityToken, as AWS answers.
		if ok || !strings.Contains(out, "AssumeRoleWithWebIdentity") || !strings.Contains(out, "InvalidIdentityToken") {
			t.Errorf("the Pod of another ServiceAccount: succeeded %v, %q; want its token exchange refused", ok, out)
		}
	})

	step(t, "no Secret in the cluster holds a key of the access", func(t *testing.T) {
		noKeyForAccess(t, string(secret.Data[cosiapi.SecretKeyS3RoleARN]))
	})
}

// adminSecrets hold the store's admin key (the driver's, docs/install.md) and the store's root
// key (the store runs in the cluster): the keys of the object store's administrator, not of any
// access.
var adminSecrets = []string{cosiNamespace + "/cosi-driver-s3-credentials", storeNamespace + "/versitygw-root"}

// noKeyForAccess fails unless every Secret of the cluster that holds an S3 key is an admin
// Secret or the Secret of a Key access, and none names role.
func noKeyForAccess(t *testing.T, role string) {
	t.Helper()
	ctx := context.Background()
	keyAccessSecrets := map[string]bool{}
	var accesses cosiapi.BucketAccessList
	if err := c.List(ctx, &accesses); err != nil {
		t.Fatal(err)
	}
	for _, a := range accesses.Items {
		var class cosiapi.BucketAccessClass
		if err := c.Get(ctx, client.ObjectKey{Name: a.Spec.BucketAccessClassName}, &class); err != nil {
			t.Fatal(err)
		}
		if class.Spec.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount {
			continue
		}
		for _, b := range a.Spec.BucketClaims {
			keyAccessSecrets[a.Namespace+"/"+b.AccessSecretName] = true
		}
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, sec := range secrets.Items {
		name := sec.Namespace + "/" + sec.Name
		hasKey := false
		for k, v := range sec.Data {
			if strings.Contains(k, "ACCESS_KEY") || strings.Contains(string(v), "SECRET_ACCESS_KEY") {
				hasKey = true
			}
			if role != "" && strings.Contains(string(v), role) && k != cosiapi.SecretKeyS3RoleARN {
				t.Errorf("Secret %s has the role %s in %s", name, role, k)
			}
		}
		if !hasKey {
			continue
		}
		keys = append(keys, name)
		if _, ok := sec.Data[cosiapi.SecretKeyS3RoleARN]; ok {
			t.Errorf("Secret %s holds a key and a role", name)
		}
		if !slices.Contains(adminSecrets, name) && !keyAccessSecrets[name] {
			t.Errorf("Secret %s holds an S3 key and is neither the store admin's nor a Key access's", name)
		}
	}
	t.Logf("Secrets with an S3 key: %v (the store admin's: %v)", keys, adminSecrets)
}

// keylessApp runs the application image in the keyless tenant as ServiceAccount sa, with nothing
// but the access's Secret in envFrom and the ServiceAccount's token for the driver's audience
// projected where the Secret's AWS_WEB_IDENTITY_TOKEN_FILE says (no API token), to completion. It
// returns the Pod's output and whether it succeeded.
func keylessApp(sa string, args ...string) (out string, ok bool, err error) {
	ctx := context.Background()
	name := "keyless-" + randomKey()[:6]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: keylessTenant, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           node.Images["cosi-test-app"],
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            args,
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: keylessClaim + "-creds"},
				}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "cosi-token", MountPath: filepath.Dir(s3.DefaultTokenFile), ReadOnly: true},
				},
				SecurityContext: restricted(),
			}},
			Volumes: []corev1.Volume{{Name: "cosi-token", VolumeSource: corev1.VolumeSource{
				Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: driverName, Path: filepath.Base(s3.DefaultTokenFile), ExpirationSeconds: ptr.To[int64](600),
					},
				}}},
			}}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return "", false, err
	}
	// No t.Fatal here: the caller runs it inside the issuer front's Serve, which must get to close
	// its listener.
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p, err := cs.CoreV1().Pods(keylessTenant).Get(wait, name, metav1.GetOptions{})
		phase := corev1.PodUnknown
		if err == nil {
			phase = p.Status.Phase
		}
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			logs, lerr := tryCommand("kubectl", "-n", keylessTenant, "logs", name)
			return strings.TrimSpace(string(logs)), phase == corev1.PodSucceeded, lerr
		}
		select {
		case <-wait.Done():
			return "", false, fmt.Errorf("Pod %s/%s has not completed after 2 minutes (phase %s)",
				keylessTenant, name, phase)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
