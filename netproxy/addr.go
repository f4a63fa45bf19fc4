package netproxy

import "net/netip"

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	sharedCGNAT = netip.MustParsePrefix("100.64.0.0/10")
	broadcast   = netip.MustParseAddr("255.255.255.255")
	metadata    = netip.MustParseAddr("169.254.169.254")
	siteLocal   = netip.MustParsePrefix("fec0::/10")
	// nat64 and v4Compatible carry an IPv4 address in their last 32 bits,
	// which a host may reach through them.
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	v4Compatible = netip.MustParsePrefix("::/96")
)

// special says what kind of address addr is when it is one an agent may
// reach only through an entry naming it exactly (loopback, link-local,
// private, unspecified, multicast, shared CGNAT, or one of these in an
// IPv4-mapped, IPv4-compatible or NAT64 form), or "" when it is a public
// address.
func special(addr netip.Addr) string {
	addr = addr.WithZone("").Unmap()
	if addr.Is6() && (nat64.Contains(addr) || v4Compatible.Contains(addr)) && !addr.IsUnspecified() && !addr.IsLoopback() {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case !addr.IsValid():
		return "an invalid address"
	case addr.IsUnspecified() || thisNetwork.Contains(addr):
		return "an unspecified address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr == metadata:
		return "the cloud metadata address"
	case addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast():
		return "a link-local address"
	case addr.IsMulticast() || addr.IsInterfaceLocalMulticast():
		return "a multicast address"
	case addr == broadcast:
		return "a broadcast address"
	case addr.IsPrivate() || siteLocal.Contains(addr):
		return "a private address"
	case sharedCGNAT.Contains(addr):
		return "a shared (CGNAT) address"
	}
	return ""
}
