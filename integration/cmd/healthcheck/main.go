// Command healthcheck is the container health check of images built FROM
// scratch (no shell, no curl): it GETs one URL and exits 0 on a 2xx
// answer, 1 otherwise.
//
//	healthcheck [--timeout 2s] [--token-env VAR] URL
//
// --token-env names an environment variable whose value is sent as a
// bearer token (so the token never appears in the image's command line).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 2*time.Second, "request timeout")
	tokenEnv := flag.String("token-env", "", "environment variable holding a bearer token")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck [--timeout 2s] [--token-env VAR] URL")
		os.Exit(2)
	}
	if err := check(flag.Arg(0), *timeout, os.Getenv(*tokenEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func check(url string, timeout time.Duration, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return nil
}
