// The lab's charts and CSV fields (lab_charts.hpp).
#include "lab_charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "ropekit/error.hpp"

namespace ropekit::cli {

Chart eval_chart(const std::vector<EvalRow>& rows, const std::vector<std::string>& methods, std::int64_t l0,
                 const std::string& model_name) {
  std::int64_t n = 0;
  for (const EvalRow& r : rows) n = std::max(n, r.n);
  Chart chart{fmt::format("{}: PPL by target position, N = {}, s = {:g} (L0 = {})", model_name, n,
                          std::max(1.0, double(n) / double(l0)), l0),
              "target position (middle of its bucket)",
              "perplexity",
              true,
              true,
              {},
              {{double(l0), fmt::format("L0 = {} (swa window)", l0)}}};
  // The windows the regime methods keep (their own dashed lines).
  for (const std::string& m : methods) {
    const std::size_t w = m.find(":w="), big_w = m.find(":W=");
    const std::size_t at = w != std::string::npos ? w + 3 : big_w != std::string::npos ? big_w + 3 : std::string::npos;
    if (at == std::string::npos) continue;
    const double x = std::atof(m.c_str() + at);
    if (x > 0 && x != double(l0)) chart.markers.push_back({x, fmt::format("{} window {:g}", m.substr(0, at - 3), x)});
  }
  for (const std::string& m : methods) {
    Series series{m, {}, {}};
    for (const EvalRow& r : rows) {
      if (r.method != m || r.n != n) continue;
      series.x.push_back(0.5 * double(r.bucket_lo + std::min(r.bucket_hi, n)));
      series.y.push_back(r.ppl);
    }
    chart.series.push_back(std::move(series));
  }
  return chart;
}

std::vector<Heatmap> passkey_heatmaps(const std::vector<PasskeyCell>& cells, const std::vector<std::string>& methods,
                                      std::int64_t l0, const std::string& model_name) {
  std::set<double> depths;
  std::set<std::int64_t> lengths;
  for (const PasskeyCell& c : cells) depths.insert(c.depth), lengths.insert(c.length);
  std::vector<Heatmap> out;
  for (const std::string& m : methods) {
    Heatmap h{fmt::format("{}: {} (L0 = {})", model_name, m, l0), "depth of the key in the filler",
              "prompt length (tokens)"};
    for (double d : depths) h.columns.push_back(fmt::format("{:g}%", 100 * d));
    for (std::int64_t n : lengths) h.rows.push_back(fmt::format("{}", n));
    const std::vector<double> ds(depths.begin(), depths.end());
    const std::vector<std::int64_t> ns(lengths.begin(), lengths.end());
    h.values.assign(ns.size(), std::vector<double>(ds.size(), std::numeric_limits<double>::quiet_NaN()));
    h.text.assign(ns.size(), std::vector<std::string>(ds.size()));
    for (const PasskeyCell& c : cells) {
      if (c.method != m) continue;
      const auto i = std::size_t(std::find(ns.begin(), ns.end(), c.length) - ns.begin());
      const auto j = std::size_t(std::find(ds.begin(), ds.end(), c.depth) - ds.begin());
      h.values[i][j] = c.keys > 0 ? double(c.retrieved) / double(c.keys) : 0.0;
      h.text[i][j] = fmt::format("{}/{}", c.retrieved, c.keys);
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("--csv {}: cannot read this file", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  std::size_t line = 1, quote_line = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      quote_line = line;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      ++line;
      fields.push_back(std::move(field));
      field.clear();
      records.push_back(std::move(fields));
      fields.clear();
    } else {
      field += c;
    }
  }
  if (quoted) throw Error(fmt::format("--csv {}: line {}: a quote that is never closed", path, quote_line));
  if (!field.empty() || !fields.empty()) {
    fields.push_back(std::move(field));
    records.push_back(std::move(fields));
  }
  return records;
}

}  // namespace ropekit::cli
