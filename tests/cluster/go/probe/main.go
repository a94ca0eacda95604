// Command probe is the test cluster's in-pod checker (a static binary, so its image needs no libraries).
//
//	probe get URL [WANT_STATUS]   GET the URL (retrying for up to 60 s) and exit 0 once the status is WANT_STATUS (200).
//	probe resolve NAME            resolve NAME through /etc/resolv.conf and print the addresses.
//	probe serve ADDR              answer every HTTP request with 200 "ok" (a stand-in target for harness checks).
//
// It never follows redirects and only prints what it saw, so a failing smoke test shows why.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: probe get URL [STATUS] | probe resolve NAME | probe serve ADDR")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "get":
		want := 200
		if len(os.Args) > 3 {
			w, err := strconv.Atoi(os.Args[3])
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad status:", err)
				os.Exit(2)
			}
			want = w
		}
		os.Exit(get(os.Args[2], want))
	case "resolve":
		os.Exit(resolve(os.Args[2]))
	case "serve":
		err := http.ListenAndServe(os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
		}))
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

func get(url string, want int) int {
	client := &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 1; ; attempt++ {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			fmt.Printf("attempt %d: GET %s -> %d %q\n", attempt, url, resp.StatusCode, body)
			if resp.StatusCode == want {
				return 0
			}
		} else {
			fmt.Printf("attempt %d: GET %s -> error: %v\n", attempt, url, err)
		}
		if time.Now().After(deadline) {
			return 1
		}
		time.Sleep(time.Second)
	}
}

func resolve(name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		fmt.Println("resolve", name, "error:", err)
		return 1
	}
	fmt.Println(name, addrs)
	return 0
}
