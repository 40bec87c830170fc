// Command-line pieces the benchmark programs share (ssu-bench, ssu-drift):
// usage errors that name the program, strict number parsing, and the shell
// quoting of the recorded command line.
#ifndef SSU_BENCH_CLI_H_
#define SSU_BENCH_CLI_H_

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bench_cli {

// The program's name in messages; main sets it before parsing.
inline const char*& program() {
  static const char* name = "ssu-bench";
  return name;
}

[[noreturn]] inline void usage_error(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n(run %s --help for the options)\n", program(), msg.c_str(),
               program());
  std::exit(2);
}

inline int64_t parse_positive(const std::string& opt, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n <= 0)
    usage_error(opt + " needs a positive integer, got '" + v + "'");
  return n;
}

inline double parse_double(const std::string& opt, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d))
    usage_error(opt + " needs a number, got '" + v + "'");
  return d;
}

// Argument *i of argv as an option: its name, and its value either inline
// (--name=value) or the next argument (which value() consumes, moving *i).
struct Option {
  std::string name;
  Option(int argc, char** argv, int* i) : name(argv[*i]), argc_(argc), argv_(argv), i_(i) {
    const size_t eq = name.find('=');
    if (name.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value_ = name.substr(eq + 1);
      name.resize(eq);
      has_inline_ = true;
    }
  }
  std::string value() const {
    if (has_inline_) return inline_value_;
    if (*i_ + 1 >= argc_) usage_error(name + " needs a value");
    return argv_[++*i_];
  }

 private:
  int argc_;
  char** argv_;
  int* i_;
  std::string inline_value_;
  bool has_inline_ = false;
};

// s as one shell word (the command line a results file records).
inline std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_=./,:+@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace bench_cli

#endif  // SSU_BENCH_CLI_H_
