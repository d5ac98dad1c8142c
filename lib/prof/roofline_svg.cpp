// Profile::roofline_svg(): a log-log roofline chart (GFLOP/s over FLOP/byte) with the machine's
// roofs (CPU with the profile's thread count, and every measured GPU device that ran a kernel)
// and one point per kernel. A kernel without FLOPs sits at the chart's left edge.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "kfuse/profile.hpp"

namespace kfuse {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string Profile::roofline_svg() const {
  const double W = 820, H = 520, L = 70, R = 200, T = 40, B = 50;  // plot area margins; legend on the right
  const double pw = W - L - R, ph = H - T - B;
  struct Line {
    std::string label, color;
    double gbps, gflops;
  };
  std::vector<Line> roofs;
  // One CPU roof per thread count the launches ran at. The drawn memory roof is the bound of a
  // kernel that reads as much as it writes.
  const std::vector<int> counts = cpu_thread_counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    const Roof cpu = roof_for(machine, Device::cpu(), DType::F32, counts[i]);
    if (cpu.read_gbps > 0)
      roofs.push_back(
          {"cpu " + std::to_string(counts[i]) + "T", i == 0 ? "#1f6fb2" : "#5b9bd5", cpu.gbps(1, 1), cpu.peak_gflops});
  }
  std::set<std::string> devs;
  for (const KernelLaunch& l : launches) devs.insert(l.device);
  for (const DeviceRoofs& d : machine.devices)
    if (devs.count(d.device)) roofs.push_back({d.device, "#b2471f", d.read_gbps, d.fma_f32_gflops});
  std::vector<KernelSummary> ks = summary();
  // Axes: intensity 1/64 .. 256 FLOP/byte; GFLOP/s spans the roofs and the points.
  const double x0 = std::log2(1.0 / 64), x1 = std::log2(256.0);
  double ymax = 1, ymin = 1e30;
  for (const Line& r : roofs) ymax = std::max(ymax, r.gflops), ymin = std::min(ymin, r.gbps / 64);
  for (const KernelSummary& k : ks)
    if (k.gflops() > 0) ymax = std::max(ymax, k.gflops()), ymin = std::min(ymin, k.gflops());
  if (ymin > ymax) ymin = ymax / 1e4;
  const double y1 = std::ceil(std::log10(ymax * 2)), y0 = std::floor(std::log10(std::max(ymin / 2, 1e-6)));
  auto px = [&](double ai) { return L + (std::log2(std::max(ai, 1.0 / 64)) - x0) / (x1 - x0) * pw; };
  auto py = [&](double g) { return T + ph - (std::log10(std::max(g, std::pow(10.0, y0))) - y0) / (y1 - y0) * ph; };

  std::ostringstream os;
  char b[512];
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"sans-serif\" font-size=\"11\">\n",
                W, H, W, H);
  os << b << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << L << "\" y=\"22\" font-size=\"14\">kfuse roofline: " << esc(machine.cpu) << "</text>\n";
  // Grid and tick labels.
  for (int e = static_cast<int>(x0); e <= static_cast<int>(x1); e += 2) {
    double x = px(std::pow(2.0, e));
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"middle\">%g</text>\n",
                  x, T, x, T + ph, x, T + ph + 15, std::pow(2.0, e));
    os << b;
  }
  for (int e = static_cast<int>(y0); e <= static_cast<int>(y1); ++e) {
    double y = py(std::pow(10.0, e));
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"end\">%g</text>\n",
                  L, y, L + pw, y, L - 5, y + 4, std::pow(10.0, e));
    os << b;
  }
  std::snprintf(b, sizeof b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">arithmetic intensity (FLOP / byte of minimum "
                "traffic)</text>\n"
                "<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">GFLOP/s</text>\n",
                L, T, pw, ph, L + pw / 2, H - 12, T + ph / 2);
  os << b;
  // Roofs: min(bandwidth * intensity, peak), drawn as a polyline over sampled intensities.
  double ly = T + 10;
  for (const Line& r : roofs) {
    os << "<polyline fill=\"none\" stroke=\"" << r.color << "\" stroke-width=\"2\" points=\"";
    for (double e = x0; e <= x1 + 1e-9; e += 0.125) {
      double ai = std::pow(2.0, e);
      double g = r.gflops > 0 ? std::min(r.gbps * ai, r.gflops) : r.gbps * ai;
      std::snprintf(b, sizeof b, "%.1f,%.1f ", px(ai), py(g));
      os << b;
    }
    os << "\"/>\n";
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s: %.1f GB/s, %.1f GFLOP/s</text>\n",
                  W - R + 8, ly, r.color.c_str(), esc(r.label).c_str(), r.gbps, r.gflops);
    os << b;
    ly += 16;
  }
  // Kernels: area of the time share, labelled with the stem and roof fraction.
  double total = 0;
  for (const KernelSummary& k : ks) total += k.seconds;
  int i = 0;
  for (const KernelSummary& k : ks) {
    const double x = px(k.intensity()), y = py(std::max(k.gflops(), std::pow(10.0, y0)));
    const double rad = 3 + 9 * std::sqrt(total > 0 ? k.seconds / total : 0);
    const char* color = k.device == "cpu" ? "#1f6fb2" : "#b2471f";
    std::snprintf(b, sizeof b,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" fill-opacity=\"0.45\" stroke=\"%s\">"
                  "<title>%s %s %s: %.1f GFLOP/s, %.1f GB/s, %.0f%% of roof</title></circle>\n",
                  x, y, rad, color, color, esc(k.kernel).c_str(), esc(k.backend).c_str(), esc(k.shape).c_str(),
                  k.gflops(), k.gbps(), k.roof_fraction() * 100);
    os << b;
    if (i < 12) {  // labels for the longest kernels only: the chart stays readable
      std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">%s (%.0f%%)</text>\n", x + rad + 2,
                    y - 2 - 10 * (i % 2), esc(k.kernel).c_str(), k.roof_fraction() * 100);
      os << b;
    }
    ++i;
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace kfuse
