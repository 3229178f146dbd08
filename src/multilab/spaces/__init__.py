"""Static cross-lingual word spaces for knn-replace: fastText per language, mapped by VecMap.

``fasttext_spaces`` trains the English and Fake-English spaces (the sentence setup) and
``verse_spaces`` one space per real language (a verse study), each writing the knn table the
training reads; ``vecmap`` is our unsupervised VecMap in torch that maps one onto the other.
"""
