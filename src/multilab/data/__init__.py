"""From the Bible database to the batches a model sees, in the pipeline's order.

``bible`` reads editions from the pinned database and exports them; ``corpus`` cleans and
splits them into sentences; ``vocab`` learns the WordPiece vocabulary and its Fake-English
twin; ``inputs`` turns a sentence into model inputs under a modification; ``batches`` groups
examples into batches, cuts them into gradient-accumulation pieces and masks them.
"""
