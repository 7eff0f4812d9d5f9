/*
 * fuzz_jinja.h - the input layout of fuzz_jinja, shared with mkseeds.c,
 * which writes seeds in it (see fuzz_jinja.c for what the target does).
 *
 * Input: one flags byte, the template, then optionally a NUL and the
 * messages, then optionally another NUL and a JSON object of request
 * variables (tools, enable_thinking, messages with tool_calls).
 *   flags     bit 0     add_generation_prompt
 *             bits 1-3  the BOS/EOS texts, FZ_JJ_PAIRS[(flags >> 1) & 7]
 *             bits 4-5  the render limits, a profile of fuzz_jinja.c's
 *                       (FZ_JJ_LIM_ROOMY: room for a published template)
 *   messages  records separated by FZ_JJ_SEP: a role byte
 *             (FZ_JJ_ROLES[b % FZ_JJ_N_ROLES]; seeds write 6 for system, a 0
 *             would end the section), then the content, where
 *             FZ_JJ_NUL stands for a NUL byte; at most 16 records. Without
 *             the first NUL a fixed two-message conversation is used; an
 *             empty section means no messages.
 */
#ifndef TS_FUZZ_JINJA_H
#define TS_FUZZ_JINJA_H

#define FZ_JJ_SEP 0x1E
#define FZ_JJ_NUL 0x1F
#define FZ_JJ_LIM_ROOMY 2

/* The BOS/EOS texts published templates are used with
 * (tests/golden/chat_templates/cases.json has each pair). */
static const char *const FZ_JJ_PAIRS[8][2] = {
    {NULL, NULL},
    {"<s>", "</s>"},
    {"<|begin_of_text|>", "<|eot_id|>"},
    {NULL, "<|im_end|>"},
    {"<bos>", "<end_of_turn>"},
    {"<s>", "<|endoftext|>"},
    {"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
     "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    {"<|endoftext|>", "<|endoftext|>"},
};

/* "odd" is a role chat.c refuses and jinja.c takes as data. */
enum { FZ_JJ_N_ROLES = 6 };
static const char *const FZ_JJ_ROLES[FZ_JJ_N_ROLES] = {"system", "user", "assistant", "tool",
                                                       "developer", "odd"};

#endif
