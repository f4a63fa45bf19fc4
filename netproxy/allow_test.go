package netproxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAllow_RefusesBadEntriesNamingThem(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{"*", `use agent.network = "host"`},
		{"*:443", `use agent.network = "host"`},
		{"", "is empty"},
		{"  ", "is empty"},
		{"10.0.0.5", "must name a port"},
		{"::1", "must name a port"},
		{"[::1]", "must name a port"},
		{"example.com:0", `port "0" is not a number from 1 to 65535`},
		{"example.com:65536", "from 1 to 65535"},
		{"example.com:https", "from 1 to 65535"},
		{"https://example.com", "no scheme, path or user"},
		{"example.com/path", "no scheme, path or user"},
		{"*.com", "at least two labels"},
		{"a.*.example.com", `"*" may only stand as the first label`},
		{"foo*.example.com", `"*" may only stand as the first label`},
		{"exa mple.com", "not a letter, digit, hyphen or underscore"},
		{"example..com", "empty label"},
		{"-example.com", "begins or ends with a hyphen"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
	} {
		_, err := ParseAllow([]string{"api.anthropic.com", tc.entry})
		if err == nil {
			t.Errorf("ParseAllow(%q) = nil error, want one saying %q", tc.entry, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"`+tc.entry+`"`) {
			t.Errorf("ParseAllow(%q) = %q, want it to name the entry and say %q", tc.entry, err, tc.want)
		}
	}
}

func TestAllow_Permits(t *testing.T) {
	a, err := ParseAllow([]string{
		"api.anthropic.com",
		"*.googleapis.com",
		"Example.COM.:8443",
		"10.0.0.5:5432",
		"[::1]:8080",
		"127.0.0.2:40123",
		"[::ffff:192.168.1.9]:22",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port int
		want bool
	}{
		{"api.anthropic.com", 443, true},
		{"api.anthropic.com", 80, true},
		{"api.anthropic.com", 8080, false},
		{"API.Anthropic.COM", 443, true},
		{"api.anthropic.com.", 443, true},
		{"evil-api.anthropic.com", 443, false},
		{"api.anthropic.com.evil.net", 443, false},
		{"anthropic.com", 443, false},
		{"generativelanguage.googleapis.com", 443, true},
		{"a.b.googleapis.com", 80, true},
		{"googleapis.com", 443, false},
		{"xgoogleapis.com", 443, false},
		{"example.com", 8443, true},
		{"EXAMPLE.com.", 8443, true},
		{"example.com", 443, false},
		{"10.0.0.5", 5432, true},
		{"10.0.0.5", 5433, false},
		{"::1", 8080, true},
		{"[::1]", 8080, true},
		{"::1", 80, false},
		{"127.0.0.2", 40123, true},
		{"127.0.0.1", 40123, false},
		{"::ffff:127.0.0.2", 40123, true},
		{"192.168.1.9", 22, true},
		{"localhost", 40123, false},
	} {
		if got := a.Permits(tc.host, tc.port); got != tc.want {
			t.Errorf("Permits(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if (Allow{}).Permits("api.anthropic.com", 443) {
		t.Error("the zero Allow permits a host")
	}
}

func TestDefaultAllow_IsTheProvidersOn443Only(t *testing.T) {
	a, err := ParseAllow(DefaultAllow)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.anthropic.com", "console.anthropic.com", "api.openai.com", "auth.openai.com", "chatgpt.com", "generativelanguage.googleapis.com"} {
		if !a.Permits(host, 443) {
			t.Errorf("DefaultAllow does not permit %s:443", host)
		}
		if a.Permits(host, 80) {
			t.Errorf("DefaultAllow permits %s:80", host)
		}
	}
	for _, host := range []string{"github.com", "registry.npmjs.org", "169.254.169.254", "localhost"} {
		if a.Permits(host, 443) {
			t.Errorf("DefaultAllow permits %s:443", host)
		}
	}
}

func TestSpecial_NamesTheAddressesThatNeedAnExactEntry(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "a loopback address"},
		{"127.9.9.9", "a loopback address"},
		{"::1", "a loopback address"},
		{"::ffff:127.0.0.1", "a loopback address"},
		{"169.254.169.254", "the cloud metadata address"},
		{"::ffff:169.254.169.254", "the cloud metadata address"},
		{"169.254.1.1", "a link-local address"},
		{"fe80::1", "a link-local address"},
		{"10.1.2.3", "a private address"},
		{"172.16.0.1", "a private address"},
		{"172.31.255.255", "a private address"},
		{"192.168.0.1", "a private address"},
		{"fd00::1", "a private address"},
		{"fc00::1", "a private address"},
		{"0.0.0.0", "an unspecified address"},
		{"0.1.2.3", "an unspecified address"},
		{"::", "an unspecified address"},
		{"224.0.0.1", "a link-local address"},
		{"239.1.2.3", "a multicast address"},
		{"ff02::1", "a link-local address"},
		{"ff05::1", "a multicast address"},
		{"255.255.255.255", "a broadcast address"},
		{"100.64.0.1", "a shared (CGNAT) address"},
		{"100.127.255.255", "a shared (CGNAT) address"},
		{"64:ff9b::a00:1", "a private address"},
		{"::7f00:1", "a loopback address"},
		{"8.8.8.8", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"2606:4700::1111", ""},
		{"64:ff9b::808:808", ""},
	} {
		if got := special(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("special(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
