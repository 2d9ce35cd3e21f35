package driver

import (
	"strings"
	"testing"

	v1 "sigs.k8s.io/container-object-storage-interface/proto"
)

// v1alpha1 marks no field of its grant response secret: the sanitizer blanks the credentials'
// secrets map by name.
func TestStripSecretsV1alpha1(t *testing.T) {
	resp := &v1.DriverGrantBucketAccessResponse{AccountId: "ba-1", Credentials: map[string]*v1.CredentialDetails{
		"s3": {Secrets: map[string]string{"accessKeyID": "AKID", "accessSecretKey": "very-secret"}},
	}}
	out := StripSecrets(resp).String()
	if strings.Contains(out, "very-secret") || !strings.Contains(out, "ba-1") {
		t.Errorf("stripped: %s", out)
	}
}
