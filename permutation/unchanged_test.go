package permutation_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/croupier-data/croupier/permutation"
)

// unchangedSpecs are builds of tables of one bucket, whose chunks must stay
// those the in-memory builder wrote before builds went through buckets.
var unchangedSpecs = map[string]permutation.Spec{
	"identity":          {},
	"filter":            {Filter: "reward > 0.3"},
	"shuffle":           {Shuffle: &permutation.ShuffleSpec{Seed: 5}},
	"clumps":            {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 16}},
	"window":            {Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 4, Window: 8}},
	"hash":              {Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{9, 1}, DiscardWeight: 1}, Shuffle: &permutation.ShuffleSpec{Seed: 2}},
	"calculated":        {Split: &permutation.SplitSpec{Kind: "calculated", Expr: "id % 4", Names: []string{"a", "b", "c"}}, Shuffle: &permutation.ShuffleSpec{Seed: 3, ClumpSize: 5}},
	"random":            {Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.7, 0.2}, Seed: 1, ClumpSize: 3}, Shuffle: &permutation.ShuffleSpec{Seed: 4, ClumpSize: 2}},
	"sequential":        {Filter: "id % 2 = 0", Split: &permutation.SplitSpec{Kind: "sequential", Fixed: 100}, Shuffle: &permutation.ShuffleSpec{Seed: 4}},
	"sequential stored": {Filter: "id % 3 != 1", Split: &permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.6, 0.3}}},
	"sequential window": {Lengths: "tokens", Filter: "tokens IS NOT NULL", Split: &permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.5, 0.5}}, Shuffle: &permutation.ShuffleSpec{Seed: 9, ClumpSize: 3, Window: 40}},
	"sequential clumps": {Split: &permutation.SplitSpec{Kind: "sequential", Counts: []int64{20000, 30000}}, Shuffle: &permutation.ShuffleSpec{Seed: 10, ClumpSize: 6}},
	"lengths":           {Lengths: "tokens", Filter: "tokens IS NOT NULL", Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{1, 1}}, Shuffle: &permutation.ShuffleSpec{Seed: 8, ClumpSize: 7}},
}

// unchangedGolden holds the SHA-256 of the splits of each of unchangedSpecs'
// manifests (names, sizes and chunk digests: all but the table's URI), as
// the in-memory builder wrote them.
var unchangedGolden = map[string]string{
	"calculated":        "f4079d186ff87f1e77a52b60e336c5b0363f8d8d4aa3c5e8e701d0352012b7d0",
	"clumps":            "032002b6765c83dff8b5f377726eaf4ec92fff30ddfb894a0fa52537a0cfeed4",
	"filter":            "579ca887c3ddf92d0a7ea9b8dc5780f4b266e1110ce1ddb13528ffb5340898ea",
	"groups hashed":     "374592507beca9d358bf3344e319340a0b10c22f4777c2668e4dc64cbfe1946e",
	"groups":            "3b17b3621a4c7faad4c208889c254c860f5c726f53ff68a656b12244a5197f35",
	"hash":              "ce9bffdde5541016965ca38a3798fc5af8e6f228e0189237cedc91878c01f57c",
	"identity":          "9ca335aa6b1b034a4ee6d75c96a4dbfc76274e996f7b7b5374b9994aaed8c8b4",
	"lengths":           "c6a2509efd746ba926110396bf4cce046291cb421942cb17224e3bf9bfeda7c4",
	"random":            "3fde14898817e23ebeeb0277d1f6764da49f7d12b2f9cc25f2db4a3143b94ef2",
	"sequential":        "1fd1c71bd3b42358f7e8fe6b4cd152122bb29e8a9d6ae46961fb7a79f1e0d006",
	"sequential stored": "c6d2eec5bd0108920132458b6899887cf157f5cbb78ef738e8bb547c4e21166d",
	"sequential window": "c9eba3948d58bdd4bda783152d2f93bc29257086515442f39dba3b6bd7f9f498",
	"sequential clumps": "d70305068d9096915d2efc662890ecd10ef3d12a0ab4c2b4e05ebbad6738deea",
	"groups shuffled":   "17f6f21314cbdf0f38a45e40e76d489fbb24fa38d8b1fb1d4cfbadd07750c0a0",
	"shuffle":           "bc9e5d2e0fdd2b5fbf10ef3421d8540980c64a5cc0b9075135295dd570a8b440",
	"window":            "fdcbe86baa09febdcf640d7ca8411eeb0e60c7efd455d8fdba8bfa3c2d2f5e5a",
}

func splitsDigest(t *testing.T, p *permutation.Permutations) string {
	t.Helper()
	m := p.Manifest()
	b, err := json.Marshal([]any{m.Format, m.IDWidth, m.Splits, m.RowsKept, m.RowGroupsSkipped})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSmallBuildsUnchanged: a table of one bucket gets the permutation the
// in-memory builder gave, chunk for chunk, so its ID stays.
func TestSmallBuildsUnchanged(t *testing.T) {
	tb := openTable(t, t.TempDir(), 70_000, 333) // splits of more than one chunk
	for name, spec := range unchangedSpecs {
		got := splitsDigest(t, build(t, tb, spec))
		if got != unchangedGolden[name] {
			t.Errorf("%s: splits digest %s, want %s", name, got, unchangedGolden[name])
		}
	}
	gtb, _ := groupedTable(t, 3, 200, 9)
	for name, spec := range map[string]permutation.Spec{
		"groups":          {GroupBy: []string{"problem_id"}},
		"groups shuffled": {Filter: "id % 5 != 2", GroupBy: []string{"problem"}, Shuffle: &permutation.ShuffleSpec{Seed: 11}},
		"groups hashed":   {GroupBy: []string{"problem"}, Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"problem"}, Weights: []int64{3, 1}}, Shuffle: &permutation.ShuffleSpec{Seed: 6}},
	} {
		got := splitsDigest(t, build(t, gtb, spec))
		if got != unchangedGolden[name] {
			t.Errorf("%s: splits digest %s, want %s", name, got, unchangedGolden[name])
		}
	}
}
