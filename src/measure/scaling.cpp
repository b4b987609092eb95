// `dtrain bench scaling`: images/sec and epoch time against the number of
// processes, beside the ideal line, as a JSON table and an SVG plot.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"

namespace dtrain {

double ScalingTable::ideal_images_per_sec(const ScalingPoint& p) const {
  if (points.empty()) return 0;
  const ScalingPoint& base = points.front();
  return base.images_per_sec * p.procs / base.procs;
}

double ScalingTable::efficiency(const ScalingPoint& p) const {
  const double ideal = ideal_images_per_sec(p);
  return ideal > 0 ? p.images_per_sec / ideal : 0;
}

double ScalingTable::epoch_seconds(const ScalingPoint& p) const {
  return p.images_per_sec > 0 ? epoch_samples / p.images_per_sec : 0;
}

ScalingTable scaling_table_from_results(const std::vector<std::string>& objects,
                                        int64_t epoch_samples) {
  ScalingTable t;
  t.epoch_samples = epoch_samples;
  std::set<int> seen;
  for (const std::string& text : objects) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("world_size") ||
        !j.contains("images_per_sec") || !j.contains("step_ms") || !j.contains("model")) {
      throw InvalidArgument(cat("bench scaling: '", text.substr(0, 80),
                                "' is not a 'dtrain bench ddp --json' result (needs world_size, "
                                "images_per_sec, step_ms, model)"));
    }
    ScalingPoint p;
    p.procs = j["world_size"].get<int>();
    p.images_per_sec = j["images_per_sec"].get<double>();
    p.step_ms = j["step_ms"].get<double>();
    if (!seen.insert(p.procs).second) {
      throw InvalidArgument(
          cat("bench scaling: two results for ", p.procs, " processes; pass one per world size"));
    }
    const std::string model = j["model"].get<std::string>();
    if (!t.model.empty() && model != t.model) {
      throw InvalidArgument(cat("bench scaling: results of models '", t.model, "' and '", model,
                                "' cannot share one plot"));
    }
    t.model = model;
    t.batch_size = j.value("batch_size", int64_t{0});
    t.points.push_back(p);
  }
  std::sort(t.points.begin(), t.points.end(),
            [](const ScalingPoint& a, const ScalingPoint& b) { return a.procs < b.procs; });
  return t;
}

std::string to_json(const ScalingTable& t) {
  nlohmann::json j;
  j["model"] = t.model;
  j["batch_size"] = t.batch_size;
  j["epoch_samples"] = t.epoch_samples;
  j["points"] = nlohmann::json::array();
  for (const auto& p : t.points) {
    j["points"].push_back({{"procs", p.procs},
                           {"images_per_sec", p.images_per_sec},
                           {"step_ms", p.step_ms},
                           {"ideal_images_per_sec", t.ideal_images_per_sec(p)},
                           {"efficiency", t.efficiency(p)},
                           {"epoch_seconds", t.epoch_seconds(p)}});
  }
  return j.dump(2);
}

namespace {

// Axis maximum: a round number (1, 2, 2.5 or 5 x 10^k) at or above `v`.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// One panel at (x0, y0), w x h: measured values (solid, circles), ideal
// values (dashed), and optional labels above the measured points.
std::string panel(double x0, double y0, double w, double h, const std::string& title,
                  const std::string& y_label, const std::vector<int>& procs,
                  const std::vector<double>& measured, const std::vector<double>& ideal,
                  const std::vector<std::string>& labels, const std::string& series) {
  const double left = 70, right = 20, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  const int max_p = procs.empty() ? 1 : procs.back();
  double max_v = 0;
  for (double v : measured) max_v = std::max(max_v, v);
  for (double v : ideal) max_v = std::max(max_v, v);
  max_v = nice_max(max_v);
  auto X = [&](double p) { return x0 + left + (max_p > 1 ? (p - 1) / (max_p - 1) : 0.5) * pw; };
  auto Y = [&](double v) { return y0 + top + ph - v / max_v * ph; };
  std::string s = cat("<g class=\"panel\" id=\"", series, "\">\n");
  s += cat("<text x=\"", num(x0 + w / 2), "\" y=\"", num(y0 + 22),
           "\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">", title, "</text>\n");
  // Axes, grid and ticks.
  s += cat("<line x1=\"", num(X(1) - 10), "\" y1=\"", num(Y(0)), "\" x2=\"", num(x0 + left + pw),
           "\" y2=\"", num(Y(0)), "\" stroke=\"#333\"/>\n");
  s += cat("<line x1=\"", num(x0 + left - 10), "\" y1=\"", num(Y(0)), "\" x2=\"",
           num(x0 + left - 10), "\" y2=\"", num(Y(max_v)), "\" stroke=\"#333\"/>\n");
  for (int i = 0; i <= 5; ++i) {
    const double v = max_v * i / 5;
    s += cat("<line x1=\"", num(x0 + left - 10), "\" y1=\"", num(Y(v)), "\" x2=\"",
             num(x0 + left + pw), "\" y2=\"", num(Y(v)), "\" stroke=\"#ddd\"/>\n");
    s += cat("<text x=\"", num(x0 + left - 14), "\" y=\"", num(Y(v) + 4),
             "\" text-anchor=\"end\" font-size=\"11\">", num(v), "</text>\n");
  }
  for (int p : procs) {
    s += cat("<text x=\"", num(X(p)), "\" y=\"", num(Y(0) + 18),
             "\" text-anchor=\"middle\" font-size=\"11\">", p, "</text>\n");
  }
  s += cat("<text x=\"", num(x0 + left + pw / 2), "\" y=\"", num(y0 + h - 10),
           "\" text-anchor=\"middle\" font-size=\"12\">processes</text>\n");
  s += cat("<text transform=\"translate(", num(x0 + 16), ",", num(y0 + top + ph / 2),
           ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">", y_label, "</text>\n");
  auto polyline = [&](const std::vector<double>& v, const std::string& style) {
    std::string pts;
    for (size_t i = 0; i < v.size(); ++i)
      pts += cat(i ? " " : "", num(X(procs[i])), ",", num(Y(v[i])));
    return cat("<polyline fill=\"none\" ", style, " points=\"", pts, "\"/>\n");
  };
  s += polyline(ideal,
                "class=\"ideal\" stroke=\"#888\" stroke-width=\"2\" stroke-dasharray=\"6,4\"");
  s += polyline(measured, "class=\"measured\" stroke=\"#1f77b4\" stroke-width=\"2.5\"");
  for (size_t i = 0; i < measured.size(); ++i) {
    s += cat("<circle class=\"point\" data-series=\"", series, "\" data-procs=\"", procs[i],
             "\" data-value=\"", num(measured[i]), "\" cx=\"", num(X(procs[i])), "\" cy=\"",
             num(Y(measured[i])), "\" r=\"4.5\" fill=\"#1f77b4\"/>\n");
    if (!labels.empty()) {
      s += cat(
          "<text class=\"efficiency\" x=\"", num(X(procs[i])), "\" y=\"", num(Y(measured[i]) - 10),
          "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#1f77b4\">", labels[i], "</text>\n");
    }
  }
  // Legend.
  const double lx = x0 + left + 10, ly = y0 + top + 6;
  s += cat("<line x1=\"", num(lx), "\" y1=\"", num(ly), "\" x2=\"", num(lx + 24), "\" y2=\"",
           num(ly), "\" stroke=\"#1f77b4\" stroke-width=\"2.5\"/><text x=\"", num(lx + 30),
           "\" y=\"", num(ly + 4), "\" font-size=\"11\">measured</text>\n");
  s += cat("<line x1=\"", num(lx), "\" y1=\"", num(ly + 16), "\" x2=\"", num(lx + 24), "\" y2=\"",
           num(ly + 16),
           "\" stroke=\"#888\" stroke-width=\"2\" stroke-dasharray=\"6,4\"/><text x=\"",
           num(lx + 30), "\" y=\"", num(ly + 20), "\" font-size=\"11\">ideal (linear from ",
           procs.empty() ? 1 : procs.front(), " process",
           procs.empty() || procs.front() == 1 ? "" : "es", ")</text>\n");
  return s + "</g>\n";
}

}  // namespace

std::string scaling_svg(const ScalingTable& t) {
  std::vector<int> procs;
  std::vector<double> ips, ideal_ips, epoch, ideal_epoch;
  std::vector<std::string> labels;
  for (const auto& p : t.points) {
    procs.push_back(p.procs);
    ips.push_back(p.images_per_sec);
    ideal_ips.push_back(t.ideal_images_per_sec(p));
    epoch.push_back(t.epoch_seconds(p));
    const double ideal = t.ideal_images_per_sec(p);
    ideal_epoch.push_back(ideal > 0 ? t.epoch_samples / ideal : 0);
    labels.push_back(cat(static_cast<int>(std::lround(t.efficiency(p) * 100)), "%"));
  }
  const double w = 1000, h = 420;
  std::string s = cat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"",
      num(w), "\" height=\"", num(h + 30), "\" viewBox=\"0 0 ", num(w), " ", num(h + 30),
      "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  s += cat("<text x=\"", num(w / 2),
           "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">dtrain scaling: model ", t.model,
           ", batch ", t.batch_size, " per process; labels: efficiency vs ideal</text>\n");
  s += panel(0, 30, w / 2, h, "Throughput", "images/sec", procs, ips, ideal_ips, labels,
             "images_per_sec");
  s += panel(w / 2, 30, w / 2, h, cat("Epoch time (", t.epoch_samples, " samples)"), "seconds",
             procs, epoch, ideal_epoch, {}, "epoch_seconds");
  return s + "</svg>\n";
}

}  // namespace dtrain
