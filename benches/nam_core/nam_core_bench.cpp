// Real-time factor and per-buffer latency of NeuralAmpModelerCore (the C++ engine inside the
// NAM plugin), measured exactly as fucina's `amp-bench` measures its own engine: the same
// xorshift noise, one thread, one `process` call per buffer, `RESULT` lines in the same
// format. With `--render in.f32 out.f32` it instead runs a raw little-endian f32 signal
// through the model in buffers of the first `--buffers` size and writes the output (a
// cross-check of both engines' samples).
//
//   nam_core_bench model.nam [--buffers 32,64] [--seconds 10] [--fast-tanh] [--render in out]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "NAM/activations.h"
#include "NAM/dsp.h"
#include "NAM/get_dsp.h"

namespace
{
std::vector<int> parse_list(const std::string& s)
{
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    v.push_back(std::stoi(item));
  return v;
}

std::vector<float> read_f32(const std::string& path)
{
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f)
    throw std::runtime_error("cannot read " + path);
  const auto bytes = static_cast<size_t>(f.tellg());
  std::vector<float> v(bytes / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}
} // namespace

int main(int argc, char* argv[])
{
  std::string model_path, render_in, render_out;
  std::vector<int> buffers = {32, 64, 128, 256, 512};
  double seconds = 10.0;
  bool fast_tanh = false;
  for (int i = 1; i < argc; i++)
  {
    const std::string a = argv[i];
    if (a == "--buffers" && i + 1 < argc)
      buffers = parse_list(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (a == "--fast-tanh")
      fast_tanh = true;
    else if (a == "--render" && i + 2 < argc)
    {
      render_in = argv[++i];
      render_out = argv[++i];
    }
    else if (a == "--help" || a == "-h")
    {
      std::cout << "usage: nam_core_bench model.nam [--buffers 32,64] [--seconds 10] [--fast-tanh] [--render in.f32 out.f32]\n";
      return 0;
    }
    else
      model_path = a;
  }
  if (model_path.empty() || buffers.empty())
  {
    std::cerr << "error: give a .nam file\n";
    return 2;
  }
  if (fast_tanh)
    nam::activations::Activation::enable_fast_tanh();
  else
    nam::activations::Activation::disable_fast_tanh();

  std::unique_ptr<nam::DSP> model = nam::get_dsp(std::filesystem::path(model_path));
  if (!model)
  {
    std::cerr << "error: cannot load " << model_path << "\n";
    return 1;
  }
  double rate = model->GetExpectedSampleRate();
  if (rate <= 0)
    rate = 48000.0;

  if (!render_in.empty())
  {
    const int bs = buffers[0];
    const std::vector<float> in = read_f32(render_in);
    std::vector<float> out(in.size());
    model->Reset(rate, bs); // prewarms: the history is the response to silence, as PyTorch's zero padding
    std::vector<NAM_SAMPLE> x(bs), y(bs);
    for (size_t s = 0; s < in.size(); s += bs)
    {
      const int n = static_cast<int>(std::min<size_t>(bs, in.size() - s));
      for (int i = 0; i < n; i++)
        x[i] = in[s + i];
      NAM_SAMPLE* xp = x.data();
      NAM_SAMPLE* yp = y.data();
      model->process(&xp, &yp, n);
      for (int i = 0; i < n; i++)
        out[s + i] = static_cast<float>(y[i]);
    }
    std::ofstream f(render_out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    return 0;
  }

  // The same deterministic noise as amp-bench (about -12 dBFS).
  const size_t n = static_cast<size_t>(seconds * rate);
  std::vector<NAM_SAMPLE> input(n), output(n);
  uint64_t state = 0x2545f4914f6cdd1dULL;
  for (size_t i = 0; i < n; i++)
  {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    input[i] = (static_cast<float>(state >> 40) / static_cast<float>(1ULL << 24) - 0.5f) * 0.5f;
  }
  const std::string name = std::filesystem::path(model_path).stem().string();
  for (const int bs : buffers)
  {
    model->Reset(rate, bs); // prewarms
    std::vector<double> times;
    times.reserve(n / bs + 1);
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t s = 0; s < n; s += bs)
    {
      const int len = static_cast<int>(std::min<size_t>(bs, n - s));
      NAM_SAMPLE* xp = input.data() + s;
      NAM_SAMPLE* yp = output.data() + s;
      const auto t = std::chrono::steady_clock::now();
      model->process(&xp, &yp, len);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    volatile NAM_SAMPLE sink = output[n / 2];
    (void)sink;
    std::sort(times.begin(), times.end());
    const double deadline = bs / rate;
    auto pct = [&](double q) { return times[static_cast<size_t>((times.size() - 1) * q)] / deadline; };
    std::printf("RESULT %s %d %.2f %.4f %.4f %.4f\n", name.c_str(), bs, seconds / total, pct(0.5), pct(0.99),
                times.back() / deadline);
  }
  return 0;
}
