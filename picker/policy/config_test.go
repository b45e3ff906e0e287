package policy

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBuildRejectsBadConfig(t *testing.T) {
	reg, _ := pool(1)
	cases := map[string]struct {
		cfg  Config
		want string // the field the error names
	}{
		"unknown policy":              {Config{Name: "fastest"}, "name"},
		"negative queue":              {Config{QueueThreshold: -1}, "queueThreshold"},
		"kv above one":                {Config{KVCacheThreshold: 1.5}, "kvCacheThreshold"},
		"negative cap":                {Config{MaxInFlight: -2}, "maxInFlight"},
		"negative staleness":          {Config{MetricsStaleness: Duration{-time.Second}}, "metricsStaleness"},
		"staleness under 1ms":         {Config{MetricsStaleness: Duration{999 * time.Microsecond}}, "metricsStaleness"},
		"negative prefill":            {Config{PrefillWeight: -1}, "prefillWeight"},
		"unknown mode":                {Config{CacheAware: CacheAwareConfig{Mode: "greedy"}}, "cacheAware.mode"},
		"negative blocks":             {Config{CacheAware: CacheAwareConfig{BlocksPerLoad: -1}}, "cacheAware.blocksPerLoad"},
		"threshold above one":         {Config{CacheAware: CacheAwareConfig{MatchThreshold: 2}}, "cacheAware.matchThreshold"},
		"rel below one":               {Config{CacheAware: CacheAwareConfig{BalanceRel: 0.5}}, "cacheAware.balanceRel"},
		"negative abs":                {Config{CacheAware: CacheAwareConfig{BalanceAbs: -1}}, "cacheAware.balanceAbs"},
		"negative weight":             {Config{WeightedScorer: WeightedScorerConfig{PrefixWeight: -3}}, "weightedScorer.prefixWeight"},
		"negative load score weight":  {Config{WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{NoHitLRUWeight: -1}}}, "weightedScorer.noHitLRUWeight"},
		"negative idle threshold":     {Config{WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{ActiveRequest: ActiveRequestScore{IdleThreshold: -1}}}}, "weightedScorer.activeRequest.idleThreshold"},
		"busy score above one":        {Config{WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{ActiveRequest: ActiveRequestScore{MaxBusyScore: 1.5}}}}, "weightedScorer.activeRequest.maxBusyScore"},
		"negative load threshold":     {Config{WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{LoadAwareThreshold: -1}}}, "weightedScorer.loadAwareThreshold"},
		"negative capacity":           {Config{Index: IndexConfig{DefaultCapacityBlocks: -1}}, "index.defaultCapacityBlocks"},
		"negative holders":            {Config{Index: IndexConfig{MaxHolders: -1}}, "index.maxHolders"},
		"negative max blocks":         {Config{Index: IndexConfig{MaxBlocks: -1}}, "index.maxBlocks"},
		"no primary port":             {Config{DataParallel: &DataParallelConfig{}}, "dataParallel.primaryPort"},
		"primary port past 65535":     {Config{DataParallel: &DataParallelConfig{PrimaryPort: 65536}}, "dataParallel.primaryPort"},
		"unknown encode stage":        {Config{Disaggregation: &DisaggregationConfig{Encode: "always"}}, "disaggregation.encode"},
		"unknown prefill pods":        {Config{Disaggregation: &DisaggregationConfig{PrefillPods: "some"}}, "disaggregation.prefillPods"},
		"session header with a space": {Config{SessionAffinity: &SessionAffinityConfig{Header: "x session"}}, "sessionAffinity.header"},
		"session pseudo-header":       {Config{SessionAffinity: &SessionAffinityConfig{Header: ":path"}}, "sessionAffinity.header"},
		"unknown session mode":        {Config{SessionAffinity: &SessionAffinityConfig{Mode: "sticky"}}, "sessionAffinity.mode"},
		"unknown session key":         {Config{SessionAffinity: &SessionAffinityConfig{Key: "cookie"}}, "sessionAffinity.key"},
		"prefer without weighted-scorer": {Config{SessionAffinity: &SessionAffinityConfig{Mode: SessionPrefer},
			WeightedScorer: WeightedScorerConfig{SessionWeight: 1}}, "sessionAffinity.mode"},
		"prefer without a weight": {Config{Name: WeightedScorer, SessionAffinity: &SessionAffinityConfig{Mode: SessionPrefer}},
			"weightedScorer.sessionWeight"},
		"session weight without affinity": {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{SessionWeight: 1}},
			"weightedScorer.sessionWeight"},
		"no default weights and no weight": {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{NoDefaultWeights: true,
			LoadScores: LoadScores{ActiveRequest: ActiveRequestScore{IdleThreshold: 2}}}}, "weightedScorer.noDefaultWeights"},
		"session weight with a pin": {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{SessionWeight: 1},
			SessionAffinity: &SessionAffinityConfig{}}, "weightedScorer.sessionWeight"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(tc.cfg, reg)
			if err == nil || !strings.Contains(err.Error(), tc.want+":") {
				t.Errorf("Build error = %v, want one naming %s", err, tc.want)
			}
		})
	}
	if _, err := Build(Config{}, nil); err == nil {
		t.Errorf("cache-aware built without a registry")
	}
	if _, err := Build(Config{Name: RoundRobin}, nil); err != nil {
		t.Errorf("round-robin needs no registry: %v", err)
	}
}

// NaN and ±Inf fail every comparison a range check is made of, and YAML
// (.nan, .inf) or an upstream parameter ("NaN") can write them; a NaN cost
// makes every candidate compare equal and the first take all traffic.
func TestBuildRejectsNonFiniteConfig(t *testing.T) {
	reg, _ := pool(1)
	nan, inf := math.NaN(), math.Inf(1)
	cases := map[string]struct {
		cfg  Config
		want string // the field the error names
	}{
		"kvCacheThreshold NaN":   {Config{KVCacheThreshold: nan}, "kvCacheThreshold"},
		"prefillWeight +Inf":     {Config{PrefillWeight: inf}, "prefillWeight"},
		"blocksPerLoad NaN":      {Config{CacheAware: CacheAwareConfig{BlocksPerLoad: nan}}, "cacheAware.blocksPerLoad"},
		"blocksPerLoad +Inf":     {Config{CacheAware: CacheAwareConfig{BlocksPerLoad: inf}}, "cacheAware.blocksPerLoad"},
		"matchThreshold NaN":     {Config{CacheAware: CacheAwareConfig{MatchThreshold: nan}}, "cacheAware.matchThreshold"},
		"balanceRel NaN":         {Config{CacheAware: CacheAwareConfig{BalanceRel: nan}}, "cacheAware.balanceRel"},
		"balanceAbs +Inf":        {Config{CacheAware: CacheAwareConfig{BalanceAbs: inf}}, "cacheAware.balanceAbs"},
		"adapterLoadCost +Inf":   {Config{CacheAware: CacheAwareConfig{AdapterLoadCost: inf}}, "cacheAware.adapterLoadCost"},
		"homeEpsilon NaN":        {Config{CacheAware: CacheAwareConfig{HomeEpsilon: nan}}, "cacheAware.homeEpsilon"},
		"queueWeight +Inf":       {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: inf, KVWeight: 1}}, "weightedScorer.queueWeight"},
		"kvCacheWeight NaN":      {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{KVWeight: nan}}, "weightedScorer.kvCacheWeight"},
		"prefixWeight -Inf":      {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{PrefixWeight: math.Inf(-1)}}, "weightedScorer.prefixWeight"},
		"loraAffinityWeight NaN": {Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: 1, LoRAWeight: nan}}, "weightedScorer.loraAffinityWeight"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(tc.cfg, reg)
			if err == nil || !strings.Contains(err.Error(), tc.want+":") {
				t.Errorf("Build error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestConfigFromJSON(t *testing.T) {
	var cfg Config
	in := `{"name":"cache-aware","metricsStaleness":"150ms","cacheAware":{"mode":"threshold","matchThreshold":0.7}}`
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Name:             CacheAware,
		QueueThreshold:   DefaultQueueThreshold,
		KVCacheThreshold: DefaultKVCacheThreshold,
		MetricsStaleness: Duration{150 * time.Millisecond},
		PrefillWeight:    DefaultPrefillWeight,
		CacheAware: CacheAwareConfig{
			Mode:            ModeThreshold,
			BlocksPerLoad:   DefaultBlocksPerLoad,
			MatchThreshold:  0.7,
			BalanceRel:      DefaultBalanceRel,
			BalanceAbs:      DefaultBalanceAbs,
			AdapterLoadCost: DefaultAdapterLoadCost,
			HomeBlocks:      DefaultHomeBlocks,
			HomeEpsilon:     DefaultHomeEpsilon,
		},
		WeightedScorer: WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3},
	}
	if diff := cmp.Diff(want, cfg.Default()); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	out, err := json.Marshal(Duration{1500 * time.Millisecond})
	if err != nil || string(out) != `"1.5s"` {
		t.Errorf("marshal = %s, %v; want \"1.5s\"", out, err)
	}
	var d Duration
	for in, want := range map[string]time.Duration{`"2s"`: 2 * time.Second, `1000`: time.Microsecond} {
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.Duration != want {
			t.Errorf("unmarshal %s = %v, %v; want %v", in, d, err, want)
		}
	}
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Errorf("unmarshal \"soon\" succeeded")
	}
	if err := d.UnmarshalText([]byte("250ms")); err != nil || d.Duration != 250*time.Millisecond {
		t.Errorf("UnmarshalText(250ms) = %v, %v", d, err)
	}
	if err := d.UnmarshalText([]byte("1000")); err != nil || d.Duration != time.Microsecond {
		t.Errorf("UnmarshalText(1000) = %v, %v; want 1µs", d, err)
	}
	if err := d.UnmarshalText([]byte("soon")); err == nil {
		t.Errorf("UnmarshalText(soon) succeeded")
	}
}
