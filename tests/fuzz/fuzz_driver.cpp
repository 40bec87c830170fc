// A seeded random driver for the fuzz target, for builds without libFuzzer
// (and for CI): feeds LLVMFuzzerTestOneInput random byte strings drawn from
// a fixed seed, so a run is reproducible input by input.
//
//   ssu_fuzz --seed S --inputs N [--seconds T] [--max-bytes M] [--verbose]
//   ssu_fuzz --hex <bytes>       runs one input (as a violation report prints it)
//
// Stops after N inputs or T seconds, whichever comes first, and prints how
// many inputs ran, how they ended (success, refusal by status) and the time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "rng.h"
#include "ssu.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: ssu_fuzz [--seed S] [--inputs N] [--seconds T] [--max-bytes M] [--verbose]\n"
               "       ssu_fuzz --hex <bytes>\n");
}

bool parse_hex(const char* text, std::vector<uint8_t>* out) {
  const size_t n = std::strlen(text);
  if (n % 2) return false;
  for (size_t i = 0; i < n; i += 2) {
    unsigned v = 0;
    if (std::sscanf(text + i, "%2x", &v) != 1) return false;
    out->push_back(uint8_t(v));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t inputs = 20000;
  double seconds = 0;  // 0: no time limit
  int64_t max_bytes = 160;
  const char* hex = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--seed" && has_value) seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--inputs" && has_value) inputs = std::strtoll(argv[++i], nullptr, 0);
    else if (a == "--seconds" && has_value) seconds = std::strtod(argv[++i], nullptr);
    else if (a == "--max-bytes" && has_value) max_bytes = std::strtoll(argv[++i], nullptr, 0);
    else if (a == "--hex" && has_value) hex = argv[++i];
    else if (a == "--verbose") ssufuzz::set_verbose(true);
    else {
      usage();
      return 2;
    }
  }
  if (hex) {
    std::vector<uint8_t> bytes;
    if (!parse_hex(hex, &bytes)) {
      usage();
      return 2;
    }
    ssufuzz::set_verbose(true);
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    std::printf("the input ran without a violation\n");
    return 0;
  }
  if (inputs < 1 || max_bytes < 1) {
    usage();
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // Hashed once, so that the streams of consecutive seeds do not overlap
  // (Rng::seeded(s) and Rng::seeded(s + 1) are one output apart).
  ssutest::Rng rng(ssutest::Rng::seeded(seed, 0xf022ull).next());
  std::vector<uint8_t> bytes;
  int64_t ran = 0;
  for (; ran < inputs; ++ran) {
    if (seconds > 0 && (ran & 63) == 0 && elapsed() >= seconds) break;
    // Short inputs too: past its end an input reads as zeros, the simplest call.
    bytes.resize(size_t(rng.below(max_bytes) + 1));
    for (auto& b : bytes) b = uint8_t(rng.next() >> 56);
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }

  const ssufuzz::Stats& s = ssufuzz::stats();
  int64_t refused = 0;
  for (const auto& kv : s.refused) refused += kv.second;
  std::printf("ssu_fuzz: seed %llu, %lld inputs in %.1f s (%.0f inputs/s), no contract violation\n",
              static_cast<unsigned long long>(seed), static_cast<long long>(ran), elapsed(),
              double(ran) / std::max(elapsed(), 1e-9));
  std::printf("  succeeded and matched the reference: %lld (%.1f%%)\n",
              static_cast<long long>(s.succeeded), 100.0 * double(s.succeeded) / double(ran));
  std::printf("  refused with a message, nothing written: %lld (%.1f%%)\n",
              static_cast<long long>(refused), 100.0 * double(refused) / double(ran));
  for (const auto& kv : s.refused)
    std::printf("    %4d %-28s %lld\n", kv.first, ssu_status_string(kv.first),
                static_cast<long long>(kv.second));
  std::printf("  plan creation only (strides no buffer fits): %lld\n",
              static_cast<long long>(s.plan_only));
  std::printf("  faults with nothing to judge (no live sequence to hit, or an accepted flush op): %lld\n",
              static_cast<long long>(s.not_applicable));
  std::printf("  by operation:");
  for (const auto& kv : s.by_operation)
    std::printf(" %s %lld", ssufuzz::operation_name(kv.first), static_cast<long long>(kv.second));
  std::printf("\n");
  std::printf("  update and replay by state dtype (inputs / matched the reference):");
  for (const auto& kv : s.by_state)
    std::printf(" %s %lld/%lld", ssu_dtype_name(kv.first), static_cast<long long>(kv.second.inputs),
                static_cast<long long>(kv.second.succeeded));
  std::printf("\n");
  return 0;
}
