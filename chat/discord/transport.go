package discord

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// discordAPI is where discordgo sends every REST request, its gateway
// lookup included.
const discordAPI = "https://discord.com/api/v"

// rewriteTransport sends discordgo's requests for Discord's API to apiURL
// instead (an API proxy, or a fake Discord in tests). apiURL names the
// versioned base, e.g. http://127.0.0.1:8080/api/v9/.
func rewriteTransport(apiURL string, next http.RoundTripper) (http.RoundTripper, error) {
	base, err := url.Parse(apiURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("discord.api_url %q is not an http(s) URL", apiURL)
	}
	if apiURL == DefaultAPIURL {
		return next, nil
	}
	prefix := strings.TrimSuffix(base.Path, "/")
	if i := strings.LastIndex(prefix, "/v"); i >= 0 {
		prefix = prefix[:i] // the version comes from discordgo's path
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if !strings.HasPrefix(r.URL.String(), discordAPI) {
			return next.RoundTrip(r)
		}
		r = r.Clone(r.Context())
		r.URL.Scheme = base.Scheme
		r.URL.Host = base.Host
		r.URL.Path = prefix + strings.TrimPrefix(r.URL.Path, "/api")
		if r.URL.RawPath != "" {
			r.URL.RawPath = prefix + strings.TrimPrefix(r.URL.RawPath, "/api")
		}
		r.Host = base.Host
		return next.RoundTrip(r)
	}), nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
