package s3

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// nonConformantIAM is an IAM service that answers successfully but leaves out what the API
// promises: GetUser without the user, CreateAccessKey without the key. (No store at hand does
// this; a driver must still not panic on it.)
// The actions in missing answer NoSuchEntity instead.
func nonConformantIAM(t *testing.T, userExists bool, missing ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		action := r.Form.Get("Action")
		w.Header().Set("Content-Type", "text/xml")
		if action == "CreateUser" && userExists {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`<ErrorResponse><Error><Type>Sender</Type><Code>EntityAlreadyExists</Code>` +
				`<Message>exists</Message></Error><RequestId>1</RequestId></ErrorResponse>`))
			return
		}
		if slices.Contains(missing, action) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`<ErrorResponse><Error><Type>Sender</Type><Code>NoSuchEntity</Code>` +
				`<Message>no such entity</Message></Error><RequestId>1</RequestId></ErrorResponse>`))
			return
		}
		// Every other action: success with an empty result.
		_, _ = w.Write([]byte(`<` + action + `Response><` + action + `Result></` + action + `Result>` +
			`<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></` + action + `Response>`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestNonConformantIAM checks that answers without the fields the IAM API promises fail the
// call with Internal instead of panicking (which would crash-loop the driver).
func TestNonConformantIAM(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	grants := []bucketGrant{{Bucket: "bucket-one", Modes: [3]cosiproto.AccessMode_Mode{cosiproto.AccessMode_READ_WRITE}}}
	trust := WebIdentityTrust{Issuer: "https://issuer.example.com", Audience: "cosi",
		Subject: "system:serviceaccount:team:app"}
	for _, tc := range []struct {
		name       string
		userExists bool
		missing    []string
		call       func(a *IAMAccounts) error
		want       string
	}{
		{"GetUser without the user (repeated grant)", true, []string{"GetRole"}, func(a *IAMAccounts) error {
			_, err := a.Grant(t.Context(), "ba-1", grants)
			return err
		}, "without the user"},
		{"GetUser without the user (revoke)", true, nil, func(a *IAMAccounts) error {
			return a.Revoke(t.Context(), "ba-1", nil)
		}, "without the user"},
		{"CreateAccessKey without the key", false, []string{"GetRole"}, func(a *IAMAccounts) error {
			_, err := a.Grant(t.Context(), "ba-1", grants)
			return err
		}, "without the key"},
		{"GetRole without the role (key grant)", false, nil, func(a *IAMAccounts) error {
			a.useRoles(true) // as New does with ServiceAccount authentication
			_, err := a.Grant(t.Context(), "ba-1", grants)
			return err
		}, "without the role"},
		{"GetUser without the user (ServiceAccount grant)", false, nil, func(a *IAMAccounts) error {
			_, err := a.GrantRole(t.Context(), "ba-1", trust, grants)
			return err
		}, "without the user"},
		{"CreateOpenIDConnectProvider without the ARN", false, []string{"GetUser"}, func(a *IAMAccounts) error {
			_, err := a.GrantRole(t.Context(), "ba-1", trust, grants)
			return err
		}, "without its ARN"},
		{"GetRole without the role (revoke)", false, nil, func(a *IAMAccounts) error {
			return a.RevokeRole(t.Context(), "ba-1")
		}, "without the role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewIAMAccounts(nonConformantIAM(t, tc.userExists, tc.missing...).URL, creds, nil)
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				err = tc.call(a)
			}()
			if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want Internal saying %q", err, tc.want)
			}
		})
	}
}
