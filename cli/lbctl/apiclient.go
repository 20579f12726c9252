package lbctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
)

// apiClient calls the scheduler and proxy admin APIs with bounded retries
// and backoff; after the last try the error says how many were made.
type apiClient struct {
	c     *retryablehttp.Client
	token string
}

func (e *env) api() *apiClient {
	c := retryablehttp.NewClient()
	c.RetryMax = 3
	c.RetryWaitMin = 200 * time.Millisecond
	c.RetryWaitMax = 2 * time.Second
	c.Logger = nil // errors are reported once, by lbctl
	c.HTTPClient.Timeout = e.timeout
	// Only transport errors and 5xx are retried; a 4xx is the answer.
	c.CheckRetry = retryablehttp.DefaultRetryPolicy
	return &apiClient{c: c, token: e.c.String("token")}
}

// do sends a request and decodes a JSON answer into v. Non-2xx answers
// become errors carrying the API's {"error": "..."} message.
func (a *apiClient) do(ctx context.Context, method, url string, body any, v any) (int, error) {
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rdr = bytes.NewReader(b)
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, url, rdr)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s: %s", method, url, resp.StatusCode, http.StatusText(resp.StatusCode), msg)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: answer is not the expected JSON: %w", method, url, err)
		}
	}
	return resp.StatusCode, nil
}

// schedulerURL is --scheduler, or the leader's API address from etcd.
func (e *env) schedulerURL(ctx context.Context) (string, error) {
	if u := e.c.String("scheduler"); u != "" {
		return strings.TrimSuffix(withScheme(u), "/"), nil
	}
	cli, err := e.etcd()
	if err != nil {
		return "", err
	}
	r, err := cli.Get(ctx, e.layout.Leader())
	if err != nil {
		return "", fmt.Errorf("find the scheduler leader: %w", err)
	}
	if len(r.Kvs) == 0 {
		return "", fmt.Errorf("no scheduler leader in etcd (%s); give --scheduler URL", e.layout.Leader())
	}
	var l report.Leader
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &l); err != nil || l.APIAddr == "" {
		return "", fmt.Errorf("leader record %s has no API address; give --scheduler URL", e.layout.Leader())
	}
	return withScheme(l.APIAddr), nil
}

func withScheme(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return addr
	}
	return "http://" + addr
}
