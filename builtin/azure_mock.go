package builtin

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// AzureMock returns a handler that answers like Azure OpenAI, serving each
// call with the OpenAI mock m: a deployment's calls
// (/openai/deployments/{deployment}/chat/completions, ...) and the
// endpoints Azure serves without one (/openai/responses) reach m at their
// /v1/ path, and so do those of Azure's v1 API (/openai/v1/...). As Azure
// does, it refuses a call without api-version (404) but on the v1 API, or
// without a key in api-key or Authorization (401), and a stream that asks
// for stream_options under an API version older than 2024-09-01 (400),
// each in Azure's error shape. A deployment's call is answered as its
// model, the deployment's name. It is safe for concurrent use.
func AzureMock(m *OpenAIMockServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version := r.URL.Query().Get("api-version")
		v1 := strings.HasPrefix(r.URL.Path, "/openai/v1/")
		if v1 && version == "" {
			version = "v1" // sorts after every dated version
		}
		if version == "" {
			writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
			return
		}
		if r.Header.Get("Api-Key") == "" && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint.")
			return
		}
		path, deployment, ok := azureToOpenAI(r.URL.Path)
		if !ok {
			writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
			return
		}
		if r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxOpenAIMockBody+1))
			if err != nil {
				writeAzureError(w, http.StatusBadRequest, "400", "reading the request: "+err.Error())
				return
			}
			if version < "2024-09-01" && bytes.Contains(body, []byte(`"stream_options"`)) {
				writeAzureError(w, http.StatusBadRequest, "400", "Unrecognized request argument supplied: stream_options")
				return
			}
			// The deployment serves its model, whatever the body says.
			var fields map[string]json.RawMessage
			if deployment != "" && json.Unmarshal(body, &fields) == nil {
				fields["model"], _ = json.Marshal(deployment)
				body, _ = json.Marshal(fields)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = path, ""
		m.ServeHTTP(w, r2)
	})
}

// azureToOpenAI is the OpenAI path of an Azure OpenAI path, and the
// deployment it names ("" for none).
func azureToOpenAI(path string) (openAI, deployment string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/openai/")
	if !ok {
		return "", "", false
	}
	if v1, ok := strings.CutPrefix(rest, "v1/"); ok {
		return "/v1/" + v1, "", true
	}
	if d, ok := strings.CutPrefix(rest, "deployments/"); ok {
		i := strings.IndexByte(d, '/')
		if i <= 0 {
			return "", "", false
		}
		deployment, rest = d[:i], d[i+1:]
	}
	return "/v1/" + rest, deployment, true
}

func writeAzureError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]map[string]string{"error": {"code": code, "message": msg}})
}
