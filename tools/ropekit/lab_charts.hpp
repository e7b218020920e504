// The lab's charts, drawn the same way from a run (`ropekit eval --svg`, `ropekit passkey --svg`) and from its CSV
// (`ropekit chart`, which the Python lab's --svg calls): PPL by target position at the largest N, and the passkey
// grids. Also the CSV's method field, quoted where a name holds a comma (regime parameters: "self_extend:W=16,G=4").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plot.hpp"
#include "ropekit/lab.hpp"

namespace ropekit::cli {

// PPL by target position (the middle of each bucket) at the largest N of `rows`, one curve per method in `methods`'
// order; dashed markers at L0 and at the windows the regime methods keep (":w=", ":W=").
Chart eval_chart(const std::vector<EvalRow>& rows, const std::vector<std::string>& methods, std::int64_t l0,
                 const std::string& model_name);

// One heatmap per method: rows the lengths, columns the depths, each cell its accuracy and "retrieved/keys".
std::vector<Heatmap> passkey_heatmaps(const std::vector<PasskeyCell>& cells, const std::vector<std::string>& methods,
                                      std::int64_t l0, const std::string& model_name);

// A CSV field: as it is, or in double quotes (quotes doubled) where it holds a comma, a quote or a line break.
std::string csv_field(std::string_view text);

// A CSV file's records, each split into fields (RFC 4180 quoting). Errors: a file that cannot be read, an
// unterminated quote (naming the line).
std::vector<std::vector<std::string>> read_csv(const std::string& path);

}  // namespace ropekit::cli
