package acp

import (
	"reflect"
	"testing"
)

// Add sums every field, and Counters keeps every counter and zeroes
// every gauge: a field added to Stats is summed and retired with no
// line of its own, as long as it is a number of one of those kinds.
func TestStats_AddSumsEveryFieldAndCountersKeepOnlyCounts(t *testing.T) {
	var a, b Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		switch va.Field(i).Kind() {
		case reflect.Uint64:
			va.Field(i).SetUint(uint64(i + 1))
			vb.Field(i).SetUint(100)
		case reflect.Int:
			va.Field(i).SetInt(int64(i + 1))
			vb.Field(i).SetInt(100)
		default:
			t.Fatalf("Stats.%s is a %s: neither a counter nor a gauge", va.Type().Field(i).Name, va.Field(i).Kind())
		}
	}
	sum, counters := reflect.ValueOf(a.Add(b)), reflect.ValueOf(a.Counters())
	for i := range va.NumField() {
		name, gauge := va.Type().Field(i).Name, va.Field(i).Kind() == reflect.Int
		var got, kept int64
		if gauge {
			got, kept = sum.Field(i).Int(), counters.Field(i).Int()
		} else {
			got, kept = int64(sum.Field(i).Uint()), int64(counters.Field(i).Uint())
		}
		if got != int64(i+101) {
			t.Errorf("Add: %s = %d, want %d", name, got, i+101)
		}
		if want := int64(i + 1); gauge && kept != 0 || !gauge && kept != want {
			t.Errorf("Counters: %s = %d (gauge %v)", name, kept, gauge)
		}
	}
}
