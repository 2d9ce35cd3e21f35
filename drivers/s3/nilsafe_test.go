package s3

import (
	"net/http"
	"net/http/httptest"
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
func nonConformantIAM(t *testing.T, userExists bool) *httptest.Server {
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
	for _, tc := range []struct {
		name       string
		userExists bool
		call       func(a *IAMAccounts) error
		want       string
	}{
		{"GetUser without the user (repeated grant)", true, func(a *IAMAccounts) error {
			_, err := a.Grant(t.Context(), "ba-1", grants)
			return err
		}, "without the user"},
		{"GetUser without the user (revoke)", true, func(a *IAMAccounts) error {
			return a.Revoke(t.Context(), "ba-1", nil)
		}, "without the user"},
		{"CreateAccessKey without the key", false, func(a *IAMAccounts) error {
			_, err := a.Grant(t.Context(), "ba-1", grants)
			return err
		}, "without the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewIAMAccounts(nonConformantIAM(t, tc.userExists).URL, creds, nil)
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
