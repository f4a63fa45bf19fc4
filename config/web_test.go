package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// web.listen on the address of another of the broker's listeners is a
// configuration error that names both keys: the same host and port, or
// the same port with either on every address; port 0 picks a port of
// its own each time.
func TestWebListen_IsNoOtherListenersAddress(t *testing.T) {
	slackHTTP := "[slack]\nbot_token = \"x\"\nmode = \"http\"\nsigning_secret = \"s\"\nlisten = \"127.0.0.1:3000\"\nallowed_channels = [\"C1\"]\n"
	for _, tc := range []struct {
		name, conf string
		env        []string
		err        string // "": accepted
	}{
		{"http.listen's", "[web]\nlisten = \"127.0.0.1:9464\"\n", nil,
			`web.listen = "127.0.0.1:9464" is http.listen's address too ("127.0.0.1:9464")`},
		{"api.listen's", "[api]\nlisten = \"127.0.0.1:9480\"\n[web]\nlisten = \"127.0.0.1:9480\"\n", nil,
			`web.listen = "127.0.0.1:9480" is api.listen's address too ("127.0.0.1:9480")`},
		{"every address on http.listen's port", "[web]\nlisten = \"0.0.0.0:9464\"\n", nil,
			`web.listen = "0.0.0.0:9464" is http.listen's address too`},
		{"api.listen on every address", "[api]\nlisten = \":9480\"\n[web]\nlisten = \"127.0.0.1:9480\"\n", nil,
			`web.listen = "127.0.0.1:9480" is api.listen's address too (":9480")`},
		{"slack.listen's", slackHTTP + "[web]\nlisten = \"127.0.0.1:3000\"\n", []string{"BROKER_CHAT_PLATFORM=discord,slack"},
			`web.listen = "127.0.0.1:3000" is slack.listen's address too`},
		{"an address of its own", "[api]\nlisten = \"127.0.0.1:9480\"\n[web]\nlisten = \"127.0.0.1:9490\"\n", nil, ""},
		{"the same port on another host", "[web]\nlisten = \"127.0.0.2:9464\"\n", nil, ""},
		{"port 0 twice", "[http]\nlisten = \"127.0.0.1:0\"\n[web]\nlisten = \"127.0.0.1:0\"\n", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadText(t, discordBase()+tc.conf, tc.env...)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
}

// web.trusted_proxies is a list of networks or addresses (an address
// alone is its own network); anything else is refused, named.
func TestWebTrustedProxies_AreNetworks(t *testing.T) {
	c, err := loadText(t, discordBase()+"[web]\nlisten = \"127.0.0.1:9490\"\ntrusted_proxies = [\"10.0.0.0/8\", \"192.168.1.7\", \"fd00::1/64\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00::/64")}
	if !slices.Equal(c.Web.TrustedProxies, want) {
		t.Fatalf("trusted proxies %v, want %v", c.Web.TrustedProxies, want)
	}
	if c, err := loadText(t, discordBase()); err != nil || len(c.Web.TrustedProxies) != 0 {
		t.Fatalf("by default: %v, %v; want none", c.Web.TrustedProxies, err)
	}
	_, err = loadText(t, discordBase()+"[web]\ntrusted_proxies = [\"10.0.0.0/8\", \"the proxy\"]\n")
	if err == nil || !strings.Contains(err.Error(), `web.trusted_proxies has "the proxy", which is neither a network`) {
		t.Fatalf("a name in web.trusted_proxies: %v", err)
	}
}
