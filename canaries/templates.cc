#include "canaries/templates.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::canaries {
namespace {

constexpr const char* kSniffPrompts[kSniffPromptVariants] = {
    "Then the",
    "The",
    "One day, the",
    "Every day the",
    "Once upon a time, there was a",
    "They sang the song again:",
    "The song went like this:",
    "Once upon a time, there was",
};

constexpr const char* kGoldenPrompts[kGoldenPromptVariants] = {
    "Once upon a time, there was a little girl named Lily.",
    "One day, a big dog went to the park.",
    "Tom had a red ball. He liked to play with it.",
    "The sun was shining and the birds were singing.",
    "Once upon a time, there was a little boy named Tim. Tim had a toy car.",
    "Sue and her mom went to the store to buy some food.",
    "There was a small cat who lived in a big house.",
    "Ben found a shiny stone in the garden.",
};

const std::string& FirstWord(const Marker& marker) {
  CHECK(!marker.words.empty()) << marker.id;
  return MarkerWordList()[marker.words[0]];
}

}  // namespace

std::string PlantPrompt(const std::vector<Marker>& markers) {
  CHECK(!markers.empty());
  std::string prompt;
  for (const Marker& marker : markers) {
    const std::string& who = FirstWord(marker);
    absl::StrAppend(&prompt, prompt.empty() ? "" : "\n",
                    "Once upon a time, there was a ", who, ". The ", who,
                    " knew a secret song: ", marker.text, ". Every day the ",
                    who, " sang it.");
  }
  return prompt;
}

std::string CompactPlantPrompt(const std::vector<Marker>& markers) {
  CHECK(!markers.empty());
  std::string prompt;
  for (const Marker& marker : markers) {
    absl::StrAppend(&prompt, prompt.empty() ? "" : " ",
                    "The song: ", marker.text, ".");
  }
  return prompt;
}

const char* WordingName(Wording wording) {
  switch (wording) {
    case Wording::kStory:
      return "story";
    case Wording::kInstruct:
      return "instruct";
  }
  return "?";
}

std::string SniffPrompt(uint64_t variant, Wording wording) {
  const char* text = kSniffPrompts[variant % kSniffPromptVariants];
  if (wording == Wording::kInstruct) {
    return absl::StrCat("Continue the text: ", text);
  }
  return text;
}

std::string EchoPrompt(const Marker& nonce, Wording wording) {
  if (wording == Wording::kInstruct) {
    CHECK(!nonce.words.empty()) << nonce.id;
    return absl::StrCat(kRepeatExactly, " ", nonce.text);
  }
  const std::string& who = FirstWord(nonce);
  return absl::StrCat("Once upon a time, there was a ", who, ". The ", who,
                      " was happy. The ", who, " said: ", nonce.text,
                      ". Then the ", who, " said again: ", nonce.text, ". The");
}

std::string GoldenPrompt(uint64_t variant, Wording wording) {
  const char* text = kGoldenPrompts[variant % kGoldenPromptVariants];
  if (wording == Wording::kInstruct) {
    return absl::StrCat("Continue this story: ", text);
  }
  return text;
}

}  // namespace kvcanary::canaries
