package memory

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// JournalEntry is one call the driver served.
type JournalEntry struct {
	Time time.Time `json:"time"`
	// Method is the RPC, Subject the bucket or account it was about (see Subject).
	Method  string `json:"method"`
	Subject string `json:"subject,omitempty"`
	// Code is the gRPC code of the answer; Injected says Faults made it fail, Acted that the
	// driver acted all the same (a fault after the action).
	Code     string `json:"code"`
	Injected bool   `json:"injected,omitempty"`
	Acted    bool   `json:"acted,omitempty"`
	// Took is how long the call took.
	Took time.Duration `json:"took"`
	// Credential is the credential_id a rotation replaces or a retirement revokes (the request's);
	// Issued the credential_id a grant or a rotation answered with. Neither is secret.
	Credential string `json:"credential,omitempty"`
	Issued     string `json:"issued,omitempty"`
	// Account is the account_id that a cosi.v1alpha1 grant answered with when it is not the name
	// the grant asked for (the Subject): a driver that names its accounts itself. Not secret.
	Account string `json:"account,omitempty"`
}

// Journal writes one JSON line per call to W, for a fault suite that shows what the driver was
// asked about an object that leaked (the object's "driver calls"). Put its interceptor before
// Faults.Interceptor to see the injected failures too. It writes no request body: no secret can
// reach it.
type Journal struct {
	mu sync.Mutex
	W  io.Writer
}

// Interceptor returns the gRPC interceptor that writes the journal.
func (j *Journal) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		e := JournalEntry{
			Time:    start,
			Method:  info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:],
			Subject: Subject(req),
			Code:    status.Code(err).String(),
			Took:    time.Since(start),
		}
		e.Credential, e.Issued = credentialIDs(req, resp)
		if m, ok := resp.(proto.Message); ok && m.ProtoReflect().Descriptor().Name() == "DriverGrantBucketAccessResponse" {
			if id := v1alpha1Field(m, "account_id"); id != "" && id != e.Subject {
				e.Account = id
			}
		}
		if msg := status.Convert(err).Message(); err != nil && strings.HasPrefix(msg, injectedPrefix) {
			e.Injected, e.Acted = true, strings.HasSuffix(msg, injectedAfterSuffix)
		}
		line, jerr := json.Marshal(e)
		if jerr == nil {
			j.mu.Lock()
			_, _ = j.W.Write(append(line, '\n'))
			j.mu.Unlock()
		}
		return resp, err
	}
}

// credentialIDs returns the credential_id of a rotation's or a retirement's request, and the one a
// grant's or a rotation's answer names.
func credentialIDs(req, resp any) (credential, issued string) {
	switch r := req.(type) {
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		credential = r.GetCredentialId()
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		credential = r.GetCredentialId()
	}
	switch r := resp.(type) {
	case *cosiproto.DriverGrantBucketAccessResponse:
		issued = r.GetCredentialId()
	case *cosiproto.DriverRotateBucketAccessCredentialsResponse:
		issued = r.GetCredentialId()
	}
	return credential, issued
}

// ReadJournal reads the entries of a journal; a line cut short by a crash is skipped.
func ReadJournal(r io.Reader) ([]JournalEntry, error) {
	var entries []JournalEntry
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		var e JournalEntry
		if json.Unmarshal(s.Bytes(), &e) == nil {
			entries = append(entries, e)
		}
	}
	if err := s.Err(); err != nil && !errors.Is(err, io.EOF) {
		return entries, err
	}
	return entries, nil
}
