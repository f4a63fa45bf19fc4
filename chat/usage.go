package chat

import (
	"fmt"
	"strings"

	"acpbroker/acp"
)

// UsageText says how full the agent's context is, what the session has
// cost, and what the turn used, in a few words ("45k/200k tokens · 3.2k
// this turn · $0.12"); "" when the agent said nothing of it.
func UsageText(u *acp.Usage, turn *acp.TurnUsage) string {
	var parts []string
	if u != nil && u.Size > 0 {
		parts = append(parts, Tokens(u.Used)+"/"+Tokens(u.Size)+" tokens")
	}
	if turn != nil && turn.TotalTokens > 0 {
		if len(parts) == 0 {
			parts = append(parts, Tokens(turn.TotalTokens)+" tokens this turn")
		} else {
			parts = append(parts, Tokens(turn.TotalTokens)+" this turn")
		}
	}
	if u != nil && u.Cost != nil {
		parts = append(parts, Money(*u.Cost))
	}
	return strings.Join(parts, " · ")
}

// Tokens is a token count for people: 950, 3.2k, 45k, 1.2M.
func Tokens(n uint64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 10_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	case n < 1_000_000:
		return fmt.Sprintf("%dk", (n+500)/1000)
	default:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
	}
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// Money is an amount for people: $0.12 for USD, else "0.12 EUR".
func Money(c acp.Cost) string {
	amount := fmt.Sprintf("%.2f", c.Amount)
	if c.Amount > 0 && c.Amount < 0.01 {
		amount = fmt.Sprintf("%.4f", c.Amount)
	}
	cur := strings.ToUpper(strings.TrimSpace(c.Currency))
	if cur == "USD" || cur == "" {
		return "$" + amount
	}
	return amount + " " + oneLine(cur, 8)
}
